"""The CPU backend's one GEMM template: C = epilogue(A @ B) as numba source, per configuration.

A configuration (`Config`) fixes a register tile of ``mr`` rows by ``nr`` columns summed
over K in registers; whether each share packs its column panel of B first (``pack``: any
layout of B; else B's rows are read in place); a K split (``ksplit`` parts summed in order
afterwards); or dot-product tiles along K (``dot``: few columns of a transposed B, a
classifier head's ``x @ w.T``). Operands are batched and strided, float32 or float64. The
epilogue ``act(acc + bias[j] + residual[i, j])`` is applied as each tile is stored, so no
second pass reads C.

Threads: the output is cut into ``shares`` by rows of tiles (or columns), each a `prange`
iteration; each element is summed in the same order whatever the share count, so thread
counts give the same bits (the K split changes the order). One share, or a ``serial``
configuration, runs the serial twin. Sources compile once into the disk cache and load
through kernels/loader.py; which configuration (or BLAS) runs a product is choice.py's
measured decision.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from . import template_text
from ..runtime import sharepool

__all__ = ["Config", "CONFIGS", "source", "kernel_for", "run", "vector_width", "ACTIVATIONS", "shares_for"]

ACTIVATIONS = {None: 0, "relu": 1}


class Config(NamedTuple):
    """One configuration of the template: tile rows, tile vectors of columns (dot tiles:
    columns), packing, K parts, dot tiles, and one share on the calling thread (``serial``)."""
    mr: int
    nv: int
    pack: bool = False
    ksplit: int = 1
    dot: bool = False
    serial: bool = False

    @property
    def name(self) -> str:
        return (f"{'d' if self.dot else 't'}{self.mr}x{self.nv}{'p' if self.pack else ''}"
                f"{'k%d' % self.ksplit if self.ksplit > 1 else ''}{'s' if self.serial else ''}")

    @property
    def compiled(self) -> "Config":
        """The configuration whose module runs this one: the tile's shape and kind (``pack``,
        ``ksplit`` and ``serial`` are a launch's arguments, so one compile serves them all)."""
        return Config(self.mr, self.nv, dot=self.dot)

    def columns(self, dtype: str) -> int:
        """Output columns of one tile: ``nv`` vectors' lanes, or ``nv`` dot products."""
        return self.nv if self.dot else self.nv * vector_width(dtype)


# The configurations the chooser measures: 8 x 3 vectors fill AVX-512's 32 registers; 6 x 4
# and 4 x 2 trade rows for columns; 8 x 1 serves narrow outputs; packed ones read a strided
# B from a contiguous panel; the K split gives few deep rows more parts; the dot tiles serve
# few columns of a transposed B; 8 x 2 fills two vectors of columns without 8 x 3's idle
# third (a convolution's weight gradient with 32 output columns: 1.6x 4 x 2's speed).
CONFIGS = (Config(8, 3), Config(6, 4), Config(4, 2), Config(8, 1), Config(8, 3, True), Config(4, 2, True),
           Config(8, 3, False, 2), Config(4, 4, dot=True), Config(4, 5, dot=True), Config(8, 2))


def vector_width(dtype: str) -> int:
    """Lanes of the vectors the template is rendered with: the widest the code numba emits
    here may use (64 bytes with AVX-512, else 32)."""
    wide = _has_avx512() if _WIDE is None else _WIDE
    return (64 if wide else 32) // (4 if dtype == "float32" else 8)


# 64-byte vectors or not whatever the host (the source for either width runs on any host:
# its test); None: the host's
_WIDE = None

def _ask_avx512() -> bool:
    """Whether the code numba emits here may use AVX-512: the features numba compiles for
    (NUMBA_CPU_FEATURES where set), else the host's."""
    try:
        from ...buildfacts import numba_facts
        features = numba_facts()[2]
        if isinstance(features, str) and features:
            return "+avx512f" in features
        import llvmlite.binding as ll
        return bool(ll.get_host_cpu_features().get("avx512f", False))
    except Exception:   # unknown CPU: the tile that fits 16 vector registers
        return False


# The answer of `_ask_avx512`, once per process: llvmlite's query costs 0.2-0.5 ms a call,
# and the layer ops ask for the panels' shape in every call.
_has_avx512 = functools.cache(_ask_avx512)


def rest_widths(v: int) -> list:
    """The column widths of the tiles past the whole panels: v, then each power of two below."""
    return [v >> i for i in range(v.bit_length())]


def _rests(v: int, dot: bool = False) -> tuple:
    """Tile definitions and calls for the columns past the whole panels: one vector, then
    narrower powers of two (dot tiles: half a tile's columns, then narrower)."""
    defs, calls = [], []
    for w in rest_widths(v):
        if dot:
            defs.append(f"_r{w} = _make_dot(MR, {w})\n_r{w}1 = _make_dot(1, {w})")
            calls.append(f"            elif jt + {w} <= j_hi:\n                w = {w}\n"
                         f"                _dot(Ax, ao, lda, Bx, bo + jt * ldb, ldb, D, do + i * n + jt, n, kk, rows, "
                         f"_r{w}, _r{w}1)")
        else:
            defs.append(f"_r{w} = _make_tile(MR, ({w},))\n_r{w}1 = _make_tile(1, ({w},))")
            calls.append(f"        elif jt + {w} <= j_hi:\n            w = {w}\n"
                         f"            _columns(A, ao0, ars, aks, B, bo0, bks, bns, D, do, n, P, k0, k1, i_lo, i_hi, "
                         f"jt, {w}, _r{w}, _r{w}1, pack)")
    return "\n".join(defs), "\n".join(calls)


def source(dtype: str, cfg: Config) -> str:
    """The numba module of one configuration's tile: ``kernel`` and its GIL-free launch in
    any number of shares (cshares.py)."""
    from ..runtime import cshares
    cfg = cfg.compiled
    v = vector_width(dtype)
    nv = cfg.nv
    defs, calls = _rests(nv // 2, True) if cfg.dot else _rests(v)
    text = template_text
    head = text.HEAD.replace("{share}", text.SHARE_DOTS if cfg.dot else text.SHARE_TILES)
    ro, rw = f"Array({dtype}, 1, 'C', readonly=True)", f"{dtype}[::1]"
    pair = cshares.source([ro] + ["int64"] * 3 + [ro] + ["int64"] * 3 + [rw, rw, ro] + ["int64"] * 12, _ARGS)
    return ((head + pair).replace("{rest_tiles}", defs).replace("{rest_calls}", calls).replace("{dot}", str(bool(cfg.dot)))
            .replace("{dtype}", dtype).replace("{mr}", str(cfg.mr)).replace("{nv}", str(nv))
            .replace("{v}", str(v)))


# the kernel's arguments before a share's (q, nq)
_ARGS = ["A", "abs_", "ars", "aks", "B", "bbs", "bks", "bns", "C", "S", "RS", "rbs", "rrs", "rcs", "bias_n",
         "nb", "m", "n", "k", "shares", "act", "ks", "pack"]


def kernel_for(dtype: str, cfg: Config):
    """The loader's kernel (kernels/loader.py `NativeKernel`) of one configuration: ``get()``
    is the compiled kernel or None while it is not loaded."""
    from ..kernels.loader import kernel
    # (sync mode loads it from the disk cache only: a compile of a configuration, 2-3 s,
    # never lands in a call; the bench's set-up and the compile workers put them there)
    cfg = cfg.compiled
    return kernel(("gemm", dtype, cfg.name), lambda: source(dtype, cfg), sync_compiles=False, later=True)


def shares_for(m: int, n: int, threads: int, cfg: Config, dtype: str = "float32") -> int:
    """Parts the output is cut into: one per thread, at most one per row tile or column
    panel of the side it is cut along (the longer in tiles)."""
    if cfg.serial:
        return 1
    units = max(-(-m // cfg.mr), -(-n // cfg.columns(dtype)))
    return max(1, min(threads, units))


def _flat(x: np.ndarray):
    """(1-D view of x's memory from its first element, offset 0, element strides) or None
    where x's strides are not non-negative multiples of its item size."""
    item = x.itemsize
    st = x.strides
    if x.size == 0 or any(s < 0 or s % item for s in st):
        return None
    span = 1 + sum((d - 1) * (s // item) for d, s in zip(x.shape, st))
    flags = x.flags
    if flags.c_contiguous:
        return x.reshape(-1), tuple(s // item for s in st)
    if flags.f_contiguous:   # (a transposed weight: its memory in order, no strided view)
        return x.T.reshape(-1), tuple(s // item for s in st)
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(item,))
    return flat, tuple(s // item for s in st)


_EMPTY = {}
_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


class _Launch:
    """A configuration's compiled entries: ``one`` (a share, or all on the calling thread)
    and ``pair`` (all shares at once on the worker pool, none holding the GIL; None where
    there is no worker pool)."""

    __slots__ = ("one", "pair")

    def __init__(self, fn):
        from ...backends import _entry_point
        from ..runtime import cshares
        g = getattr(fn, "py_func", fn).__globals__
        self.one = _entry_point(fn)
        self.pair = cshares.CShares.make(g, _entry_point)


_launches: dict = {}   # a configuration's kernel -> its _Launch


def run(fn, cfg: Config, a: np.ndarray, b: np.ndarray, *, bias=None, residual=None, act=None,
        threads: int = 1, out=None) -> np.ndarray | None:
    """``act(a @ b + bias + residual)`` by the compiled configuration `fn`: a (..., m, k),
    b (..., k, n) or (k, n), same float dtype, batch dims equal or b's absent. None where
    the layout does not fit (the caller runs BLAS). Several shares run GIL-free on the worker
    pool (sharepool.launch where that launch is not built), one on this thread."""
    dt = a.dtype
    batch = a.shape[:-2]
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    nb = math.prod(batch) if batch else 1
    a3 = a.reshape((nb, m, k)) if a.ndim != 3 else a
    b3 = b[None] if b.ndim == 2 else b.reshape((nb,) + b.shape[-2:]) if b.ndim != 3 else b
    fa, fb = _flat(a3), _flat(b3)
    if fa is None or fb is None or a3.ndim != 3 or b3.ndim != 3:
        return None
    (A, (abs_, ars, aks)), (B, (bbs_, bks, bns)) = fa, fb
    if b3.shape[0] == 1:    # (one B for every product of the batch)
        bbs_ = 0
    if out is None:
        out = np.empty(batch + (m, n), dt)
    C = out.reshape(-1)
    ks = cfg.ksplit
    bias_n = 0 if bias is None else n
    scratch = (ks - 1) * nb * m * n
    S = np.empty(scratch + bias_n, dt) if (scratch or bias_n) else _EMPTY.setdefault(dt, np.empty(0, dt))
    if bias_n:
        S[scratch:] = bias
    if residual is not None:
        r = np.broadcast_to(residual, batch + (m, n)).reshape((nb, m, n)) if residual.ndim != 3 \
            else residual
        fr = _flat(r) if all(s >= 0 for s in r.strides) else None
        if fr is None:
            r = np.ascontiguousarray(r)
            fr = _flat(r)
        RS, (rbs, rrs, rcs) = fr
    else:
        RS, rbs, rrs, rcs = _EMPTY.setdefault(dt, np.empty(0, dt)), 0, 0, 0
    shares = shares_for(m, n, threads, cfg, _NAMES[dt])
    launch = _launches.get(fn)
    if launch is None:
        launch = _launches[fn] = _Launch(fn)
    args = (A, abs_, ars, aks, B, bbs_, bks, bns, C, S, RS, rbs, rrs, rcs, bias_n, nb, m, n, k, shares,
            ACTIVATIONS[act], ks, int(cfg.pack))
    if shares == 1:   # (no parallel region to wake for one share)
        launch.one(*args, 0, 1)
    # (sharepool.launch runs every share on this thread where another launch holds the
    # threads: one call then, the K parts' sums included)
    elif (launch.pair is not None and _pair_launch(launch.pair, args, shares)) \
            or sharepool.launch(launch.one, args, shares) > 1:
        if ks > 1:
            launch.one(*args, 0, 0)    # (the K parts' sums, once every share ended)
    return out


def _pair_launch(pair, args, shares: int) -> bool:
    """`pair` run on `args` in `shares` shares where the share pool is free (one launch at
    a time uses its tables); False where another launch holds it."""
    if not sharepool.try_launch():
        return False
    try:
        pair(args, shares)
    finally:
        sharepool.end_launch()
    return True
