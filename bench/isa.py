"""Running the bench as a machine with a smaller instruction set would (``--isa avx2``).

The targets hold "on AVX-512 and AVX2 machines", and the machines we get are mostly AVX-512.
Every library in the bench picks its code by the CPU it finds at run time, and each has a
switch to pick a smaller set instead, so on an AVX-512 host a whole run can use the code an
AVX2 (Haswell-class) machine would run: the kernels tracejit generates (numba/LLVM), numpy's
OpenBLAS, PyTorch's ATen kernels, MKL and oneDNN, and XLA's generated code. What this cannot
emulate is the rest of an AVX2 machine (its caches, memory and clock), so its figures answer
"does our code lose its lead when the wide vectors go", not "how fast is an AVX2 machine".

Each system process reports what it actually ran with (`observed`), so a run whose switch
did not take says so instead of passing AVX-512 figures off as AVX2.

One switch is known not to reach everything: XLA's ``--xla_cpu_max_isa`` limits the code
XLA generates, not its matrix products (Eigen's contraction kernels pick their own): a
256x1024x1024 jax.jit product ran at 304-344 GFLOP/s with the flag and 324-342 without,
where numpy's OpenBLAS fell from 348-363 to 219-229 with its Haswell core. So
jax.jit's GEMM-bound rows (the MLP step) in an ``--isa avx2`` run still have AVX-512
products, and the report says so.
"""
from __future__ import annotations

import ctypes
import os
import sys

ISAS = ("native", "avx2")

# What LLVM's "haswell" CPU has, AVX-512 switched off explicitly: NUMBA_CPU_NAME alone keeps
# the host's features (numba passes them with the name), so AVX-512 code would still be
# emitted on an AVX-512 host.
HASWELL_FEATURES = ("+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fsgsbase,+lzcnt,"
                    "+mmx,+movbe,+popcnt,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,"
                    "+xsaveopt,+fxsr,-avx512f,-avx512bw,-avx512dq,-avx512vl,-avx512cd")


def env_for(isa: str, base: dict | None = None) -> dict[str, str]:
    """The environment variables that make every library in a child process use `isa`'s code.

    `base` is the environment the child would otherwise get (for XLA_FLAGS, which other
    flags may share). Raises ValueError naming the culprit for an unknown `isa`.
    """
    if isa not in ISAS:
        raise ValueError(f"unknown instruction set {isa!r} (known: {', '.join(ISAS)})")
    if isa == "native":
        return {}
    base = os.environ if base is None else base
    xla = " ".join(f for f in (base.get("XLA_FLAGS", ""), "--xla_cpu_max_isa=AVX2") if f)
    return {
        "NUMBA_CPU_NAME": "haswell",            # tracejit's kernels (and numba's own)
        "NUMBA_CPU_FEATURES": HASWELL_FEATURES,
        "OPENBLAS_CORETYPE": "Haswell",         # numpy's BLAS (a DYNAMIC_ARCH OpenBLAS)
        "ATEN_CPU_CAPABILITY": "avx2",          # PyTorch's vectorized ATen kernels
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",      # PyTorch's GEMMs (MKL)
        "ONEDNN_MAX_CPU_ISA": "AVX2",           # PyTorch's oneDNN (convolutions, RNNs)
        "XLA_FLAGS": xla,                       # jax.jit's generated code
    }


def observed() -> dict:
    """What this process runs with, read from the libraries it has loaded (not from the
    environment): numba's target, OpenBLAS's core, PyTorch's capability where torch is
    loaded. Unknown entries are left out."""
    seen: dict = {}
    try:
        import numba
        seen["numba_cpu"] = numba.config.CPU_NAME or "host"
        feats = numba.config.CPU_FEATURES or ""
        seen["numba_avx512"] = "-avx512f" not in feats if feats else None
    except Exception:   # numba absent (a torch- or jax-only process): nothing to read
        pass
    core = openblas_core()
    if core:
        seen["openblas_core"] = core
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            seen["torch_capability"] = torch.backends.cpu.get_cpu_capability()
        except Exception:
            pass
    if "jax" in sys.modules:
        seen["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    return seen


def openblas_core() -> str | None:
    """The core OpenBLAS chose for numpy's BLAS ("SkylakeX", "Haswell", ...), or None."""
    import numpy  # noqa: F401  (loads the library)
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    except OSError:
        return None
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename64_", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None
