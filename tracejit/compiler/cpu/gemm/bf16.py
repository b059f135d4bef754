"""The bf16 GEMM: ``C = A @ B`` of bf16 words, float32 accumulation, bf16 result.

`matmul` takes the uint16 words of both operands (any strides, batch dims broadcast) and
returns the product's words rounded to nearest even once. Ways, chosen once per process
(`choice`): ``"mkl"``, MKL's ``cblas_gemm_bf16bf16f32`` where an Intel CPU has bf16 units
and ``mkl`` is installed (3.7-4.7x numpy's sgemm); ``"dot"``, avx512_bf16 units MKL does not
run (AMD): per product key the GEMM choice (choice.py) races tracejit's ``vdpbf16ps`` kernel
(bf16_pack.py) against the words way and keeps the faster, words until it has measured;
``"words"``, the words widened for numpy's sgemm; ``"float32"``, no bf16 units: widen, sgemm, round. They differ
only in the order of the float32 additions (and ``"dot"`` in reading subnormal bf16 inputs
as zero). ``TRACEJIT_BF16_GEMM=mkl|dot|words|float32`` or `force` fixes the choice.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from typing import Optional

import numpy as np

from .... import envflags
from ....bf16 import STORAGE, to_bfloat16, to_float32
from ....ops.linalg import _swap

__all__ = ["matmul", "matmul_nt", "matmul_tn", "takes", "not_words", "choice", "force", "has_bf16_units",
           "mkl_runs_units", "mkl_gemm", "round_values", "dot_runs"]

CHOICES = ("mkl", "dot", "words", "float32")
_lock = threading.Lock()
_chosen: list = [None]
_mkl: list = [None]       # [ctypes function | False] once looked for


def has_bf16_units() -> bool:
    """Whether this process may use bf16 matrix units: the CPU's flags, unless numba targets
    a CPU without them (``NUMBA_CPU_FEATURES``) or MKL was limited below AVX-512."""
    feats = os.environ.get("NUMBA_CPU_FEATURES", "")
    if feats and "+avx512bf16" not in feats and "+amx-bf16" not in feats:
        return False
    limit = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").upper()
    if limit and not limit.startswith("AVX512"):
        return False
    return bool(set(_cpuinfo("flags").split()) & {"amx_bf16", "avx512_bf16"})


def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def mkl_runs_units() -> bool:
    """Whether MKL's bf16 GEMM runs on this CPU's bf16 units (Intel only: on AMD it took a
    generic path slower than numpy's sgemm)."""
    return has_bf16_units() and _cpuinfo("vendor_id") == "GenuineIntel"


def dot_runs() -> bool:
    """Whether tracejit's ``vdpbf16ps`` kernel runs here: the CPU's avx512_bf16, numba's
    target with it (``NUMBA_CPU_FEATURES``) and the kernel compiled (bf16_tile.py)."""
    if "avx512_bf16" not in _cpuinfo("flags").split():
        return False
    # (the kernel alone, through llvmlite: the driver imports numba, which a capture deciding
    # its products' dtype must not import while it wraps print, numba's typing keys print)
    from . import bf16_tile
    return bf16_tile.address() is not None


def mkl_gemm():
    """MKL's ``cblas_gemm_bf16bf16f32`` as a ctypes function, or None without MKL."""
    fn = _mkl[0]
    if fn is None:
        fn = False
        names = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        names += ["libmkl_rt.so.2", "libmkl_rt.so.3", "libmkl_rt.so"]
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                fn = lib.cblas_gemm_bf16bf16f32
            except (OSError, AttributeError):
                continue
            if not os.environ.get("MKL_THREADING_LAYER"):
                # GNU OpenMP, numba's runtime: Intel's spins 200 ms after each GEMM on the
                # cores the next kernel needs
                lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
                lib.MKL_Set_Threading_Layer(3)   # MKL_THREADING_GNU
            fn.restype = None
            fn.argtypes = ([ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int])
            break
        _mkl[0] = fn
    return fn or None


def choice() -> str:
    """The way this process computes bf16 products (see the top)."""
    c = _chosen[0]
    if c is None:
        with _lock:
            env = envflags.value("TRACEJIT_BF16_GEMM").lower()
            if env and env not in CHOICES:
                raise ValueError(f"TRACEJIT_BF16_GEMM={env!r}: expected one of {', '.join(CHOICES)}")
            c = env or _default()
            if c == "mkl" and mkl_gemm() is None:
                raise RuntimeError("TRACEJIT_BF16_GEMM=mkl: MKL's cblas_gemm_bf16bf16f32 was not found "
                                   "(pip install mkl, or tracejit[mkl])")
            if c == "dot" and not dot_runs():
                raise RuntimeError("TRACEJIT_BF16_GEMM=dot: this CPU (or numba's target) has no avx512_bf16")
            _chosen[0] = c
    return c


def _default() -> str:
    """MKL's GEMM where it runs the units, else tracejit's kernel where it runs, else words
    where there are units and MKL (as before the kernel), else float32."""
    if mkl_runs_units() and mkl_gemm() is not None:
        return "mkl"
    if dot_runs():
        return "dot"
    return "float32" if not has_bf16_units() or mkl_gemm() is None else "words"


def force(way: Optional[str]) -> Optional[str]:
    """Fix the choice (`CHOICES`), or None to choose again; returns the previous one."""
    if way is not None and way not in CHOICES:
        raise ValueError(f"bf16 GEMM: unknown way {way!r} (expected one of {', '.join(CHOICES)})")
    if way == "mkl" and mkl_gemm() is None:
        raise RuntimeError("bf16 GEMM: MKL's cblas_gemm_bf16bf16f32 is not available (pip install mkl)")
    if way == "dot" and not dot_runs():
        raise RuntimeError("bf16 GEMM: the dot way needs avx512_bf16, which this CPU (or numba's target) lacks")
    prev, _chosen[0] = _chosen[0], way
    return prev


def takes(a, b) -> bool:
    """The checker: both operands are bf16 words (ops/impls.py)."""
    return a.dtype == STORAGE and b.dtype == STORAGE and a.ndim >= 2 and b.ndim >= 2


def not_words(a, b) -> bool:
    """The other products' checker: operands that are not bf16 words."""
    return a.dtype != STORAGE


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bf16 words ``a @ b`` (batch dims broadcast as numpy's matmul), bf16 words out."""
    way = choice()
    if way == "dot" and _dot_chosen(a, b):
        return dot_matmul(a, b)
    return words_matmul(a, b, "words" if way == "dot" else way)


def words_matmul(a: np.ndarray, b: np.ndarray, way: str = "words") -> np.ndarray:
    """`matmul` on numpy's sgemm (MKL's bf16 GEMM for ``way`` "mkl")."""
    if a.ndim == 2 and b.ndim == 2:
        return round_words(product_f32(a, b, way))
    if way != "mkl":   # (each operand widened once, not once per batch index)
        return round_words(np.matmul(widen_words(a), widen_words(b)))
    if b.ndim == 2:    # (..., m, k) @ (k, n): one product over the flattened rows
        lead = a.shape[:-1]
        out = product_f32(np.ascontiguousarray(a).reshape(-1, a.shape[-1]), b)
        return round_words(out).reshape(lead + (b.shape[1],))
    return round_words(_per_batch(product_f32, a, b, np.float32))


def _per_batch(product, a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """``product`` of each batch index's 2-D operands (batch dims broadcast) into one array."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]), dtype)
    for idx in np.ndindex(*batch):
        out[idx] = product(a[idx], b[idx])
    return out


def product_f32(a: np.ndarray, b: np.ndarray, way: str = "") -> np.ndarray:
    """The float32 product of two 2-D bf16 word arrays (the way `choice` gives, or ``way``)."""
    m, k = a.shape
    n = b.shape[1]
    way = way or choice()
    if way == "dot" and _dot_chosen(a, b):
        from . import bf16_pack
        return bf16_pack.product(a, b, words=False)
    if way == "mkl" and m and n and k:
        out = np.empty((m, n), np.float32)
        ta, lda, a = _operand(a)
        tb, ldb, b = _operand(b)
        mkl_gemm()(101, ta, tb, m, n, k, 1.0, a.ctypes.data, lda, b.ctypes.data, ldb, 0.0,
                   out.ctypes.data, n)
        return out
    return np.matmul(widen_words(a), widen_words(b))   # (the numpy form's: bf16.matmul_words)


def _dot_chosen(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the GEMM choice runs ``a @ b`` on the bf16 units (`dot_matmul`)."""
    from ..runtime import coreshare
    from . import choice as gemm_choice
    return gemm_choice.choose(gemm_choice.key_for(a, b, coreshare.core_share.cpus)) == gemm_choice.DOT


def dot_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`matmul` on the bf16 units: one product over N-d a's rows times a 2-D b, else one
    product per batch index (each split over the threads)."""
    from . import bf16_pack
    if b.ndim == 2:
        lead = a.shape[:-1]
        rows = a.reshape(-1, a.shape[-1]) if a.ndim > 2 else a
        return bf16_pack.product(rows, b).reshape(lead + (b.shape[1],))
    return _per_batch(bf16_pack.product, a, b, STORAGE)


def _operand(x: np.ndarray):
    """(CBLAS transpose flag, leading dimension, array) for row-major `x` as it lies."""
    if x.strides[1] == 2 and x.strides[0] >= 2 * max(1, x.shape[1]):
        return 111, x.strides[0] // 2, x        # row-major rows
    if x.strides[0] == 2 and x.strides[1] >= 2 * max(1, x.shape[0]):
        return 112, x.strides[1] // 2, x        # a transposed row-major array
    return 111, x.shape[1], np.ascontiguousarray(x)


def _convert(which: int, x: np.ndarray, dtype):
    """``x`` through conversion kernel `which` of `_kernels` into a new `dtype` array, or None
    where the kernels are not loaded or `x` is small (the caller's numpy form runs)."""
    kernels = _kernels()
    if kernels is None or x.size < 4096:
        return None
    x = np.ascontiguousarray(x)
    out = np.empty(x.shape, dtype)
    kernels[which](x.reshape(-1), out.reshape(-1))
    return out


def round_words(f: np.ndarray) -> np.ndarray:
    """float32 -> bf16 words (the kernel's rounding where it is loaded, numpy's before)."""
    out = _convert(0, f, STORAGE)
    return to_bfloat16(f) if out is None else out


def widen_words(w: np.ndarray) -> np.ndarray:
    """bf16 words -> float32, one pass (the kernel where it is loaded; numpy's before)."""
    transposed = w.ndim == 2 and not w.flags.c_contiguous and w.T.flags.c_contiguous
    if transposed and w.size >= 4096 and _kernels():
        return widen_words(w.T).T       # (a transposed operand stays transposed for BLAS)
    out = _convert(1, w, np.float32)
    return to_float32(w) if out is None else out


def round_values(f: np.ndarray) -> np.ndarray:
    """float32 -> float32 holding each value rounded to bf16: ``widen(round(f))`` in one
    pass (tracejit/bf16.py's `round_values`; numpy's two forms before the kernel loads)."""
    out = _convert(2, f, np.float32)
    return to_float32(to_bfloat16(f)) if out is None else out


_kernel: list = [None]


def _kernels():
    """(rounding, widening, rounding in float32) numba kernels of whole arrays, or None
    where numba fails."""
    k = _kernel[0]
    if k is None:
        try:
            import numba
            from ...bf16math import bf16_to_f32, f32_to_bf16

            @numba.njit(parallel=True, cache=True, nogil=True)
            def rounding(f, out):
                for i in numba.prange(f.size):
                    out[i] = f32_to_bf16(f[i])

            @numba.njit(parallel=True, cache=True, nogil=True)
            def widening(w, out):
                for i in numba.prange(w.size):
                    out[i] = bf16_to_f32(w[i])

            @numba.njit(parallel=True, cache=True, nogil=True)
            def through(f, out):
                for i in numba.prange(f.size):
                    out[i] = bf16_to_f32(f32_to_bf16(f[i]))
            # (on the threads the machine gives now, as every parallel kernel: two threads
            # where another process held a core stalled each call at numba's barrier)
            from ..runtime.coreshare import guard_parallel
            k = tuple(guard_parallel(f) for f in (rounding, widening, through))
        except Exception:   # (numba unusable here: numpy's conversions are the same bits)
            k = False
        _kernel[0] = k
    return k or None



def matmul_nt(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` of bf16 words (matmul's input gradient)."""
    return matmul(a, _swap(b))


def matmul_tn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a.T @ b`` of bf16 words (matmul's weight gradient)."""
    return matmul(_swap(a), b)


def on_words() -> bool:
    """Whether bf16 products run on the words (mkl and words ways), so a graph keeps bf16
    activations. Under the float32 way a bf16 product is widened in the graph like any op,
    so the widening and rounding fuse into the kernels around it."""
    return choice() != "float32"


matmul.bf16_words = matmul_nt.bf16_words = matmul_tn.bf16_words = on_words   # (ops/bf16_eager.py)
