"""Products of few rows on one thread by a register-tile kernel that packs nothing.

Why: coreshare runs a product of fewer than ``FEW_ROWS`` rows (or a small one) on one BLAS
thread (a second thread reads all of B, the weights the update right after writes). On
one thread numpy's OpenBLAS takes 108-111 us for the two-layer step's 64x1000 @ 1000x100
float32 product and 99-102 us for its 1000x64 @ 64x100 weight gradient, PyTorch's MKL
88-91 us for both (near-quiet, min of 9 x 400 calls). BLAS packs both operands
into panels on every call, which costs such small products a good share of their time.
Here nothing is packed: each register tile (GMR rows x GNV vectors of columns, summed
over all of K in registers: the GEMM template's `_make_tile`, compiler/cpu/gemm/template.py) reads B's rows in place and
broadcasts A's values from where they are, A row-major or a transposed view alike. The
same products took 84-86 and 88-90 us (the whole of B's column panel, K x GNV*GV, stays
in L2; blocking K for L1 ran no faster).

``x @ w.T`` (an F-contiguous B: nn.Linear's layout) of few rows runs as ``(w @ x.T).T``, w's
rows read in place as the kernel's rows and a copy of x.T as its columns (`_transposed`):
one OpenBLAS thread is slow on such products (16x2048x200 float32: 239 us against 129).

With AVX2's 16 vector registers the tile (4 rows x 3 vectors) sums K in blocks of
`K_BLOCK_AVX2` rows, whose part of B's column panel stays in L1, and adds each block's sums
to C (`k_block`; chosen once per process by the instruction set; AVX-512's tile sums all of K
at once, as before). Products of one block run a row tile across all its columns first.

The kernel releases the GIL (``nogil``), as numpy's product does, so other Python threads
run meanwhile. Columns left over past the whole panels run tiles of one vector, then of narrower powers
of two (a rest of 4 columns: one 4-wide vector per row). Results differ from BLAS's in the
last bits (another summation order), as BLAS's own do between thread counts.

Loaded with compiler/cpu/kernels/loader.py's policy (no compile or numba import in a first call; numpy
until the kernel is loaded), except that sync mode (``TRACEJIT_COMPILE=sync``: the tests,
the bench's compiled runner) only loads it from the disk cache and never compiles it in the
call: its compile (0.5-0.8 s) would land in a compiled function's cold first call, for
~20 us a product. `product` returns None when it cannot run (the caller runs numpy's
product).
"""
from __future__ import annotations

import numpy as np

from . import template, template_panels
from ..kernels.loader import kernel as _kernel

__all__ = ["product", "module_kernel", "tile_shape", "k_block", "K_BLOCK_AVX2", "rest_rows", "MIN_COLUMNS", "MIN_DEPTH", "MIN_MNK", "T_MIN_ROWS", "T_MAX_ROWS"]

# Where the kernel beats one OpenBLAS thread (min us, near-quiet, AVX-512,
# float32 / float64): 64x1000x100 82 / 184 against 104 / 250, 32x1024x200 86 / 221 against
# 122 / 263, 16x2048x200 (a transposed) 126 / 294 against 180 / 403, 1000x64x100 (a
# transposed) 80 / 160 against 83 / 226, 784x64x128 (a transposed) 77 / 172 against 89 / 205,
# 256x128x200 75 / 145 against 87 / 183. It ties or loses on smaller or narrower ones, where
# its call and the column rest weigh more: 64x512x128 60 / 97 against 61 / 150, 100x800x64
# 95 / 192 against 84 / 187, 100x256x64 35 / 68 against 26 / 60, 64x100x100 17 / 24 against
# 9 / 17. So: at least MIN_MNK multiply-adds, MIN_DEPTH of K (the smallest measured) and
# MIN_COLUMNS columns (two whole panels of the AVX-512 tile).
MIN_MNK = 1 << 22
MIN_DEPTH = 64
MIN_COLUMNS = 96
# Rows of a between which an F-contiguous b (``x @ w.T``, nn.Linear's layout) runs here, as
# ``(w @ x.T).T`` (`_transposed`): a's rows are then the kernel's columns. One OpenBLAS thread
# is slow on few-row products of a transposed b. Measured min / median us, one thread, load 3,
# float32 (float64): 8x1024x512 269/320 against 111/136 here (312/378
# against 164/176), 16x2048x200 239/265 against 129/147 (342/413 against 262/316), 32x1024x256
# 198/217 against 165/178 (288/340 against 223/242), 48x1000x100 87/99 against 68/84 (152/163
# against 117/139). At 64 rows it ties or loses: 64x1000x100 109/131 against 104/122 (209/250
# against 211/252), 64x512x128 69/78 against 77/92 (126/136 against 136/150): the copy of a.T
# (13-17 us for 64x1000, transp.py) and a fourth vector of columns eat the gain. Below 8 rows
# the kernel's columns are narrower than a vector.
T_MIN_ROWS = 8
T_MAX_ROWS = 48


def tile_shape(dtype: str) -> tuple:
    """(GV, GMR, GNV): vector width in elements, rows and vectors of columns of the tile.
    GMR*GNV accumulators, GNV vectors of B and a broadcast fit the register file: 8 x 3
    in 32 vector registers (AVX-512), 4 x 3 in 16 (AVX2). Measured for 64x1000x100
    float32 with AVX-512: 8 x 3 86 us, 7 x 3 98, 6 x 4 103, 4 x 6 and 10 x 2 115, 12 x 2
    113, 14 x 2 137."""
    bytes_ = 4 if dtype == "float32" else 8
    if template_panels._has_avx512():
        return 64 // bytes_, 8, 3
    return 32 // bytes_, 4, 3


# Depth of the K blocks the AVX2 tile (4 x 3 vectors: 24 float32 or 12 float64 columns, 96 bytes a
# row of B's panel) sums in registers before adding its partial sums to C: 256 rows of the panel
# are 24 KB, which stay in L1 (32-48 KB) across a column panel's row tiles, where the whole
# panel (K x 96 bytes: 96 KB for K = 1000) streams from L2 for each of them. The two-layer
# step's 64x1000x100 float32 product in AVX2 code (NUMBA_CPU_NAME=haswell without AVX-512,
# one thread, min / median us, load 2.5): 118-121 / 121-124 whole, 111-113 /
# 111-114 with 256, 111-112 / 114 with 192, 118-119 / 122-123 with 384 (36 KB: no gain), 113-114
# / 114-116 with 128; PyTorch's MKL at AVX2 111-115 / 114-117. Its 1000x64x100 weight gradient
# (K = 64: one block) is unchanged. The AVX-512 tile (8 x 3, 192 bytes a row) sums all of K at
# once (0): blocking it ran no faster (8x3 64x1000x100: 69-78 / 78-79 whole, 70-79 / 79 with
# 256), and so its results stay bitwise what they were. Blocks change the summation order:
# results differ from the whole-K sums in the last bits, as BLAS's do between thread counts.
# A product of one block (K <= K_BLOCK_AVX2: the step's 1000x64x100 weight gradient) runs a row
# tile across all its column tiles before the next (`_by_rows`: its K x 4 values of A stay in L1)
# instead of a column panel down all row tiles; the same sums, bitwise. That gradient in AVX2
# code, one thread, min / median us (8 alternating rounds, load 2.5): 116-118 / 118 against
# 117 / 122-123. The AVX-512 kernel keeps the panel order (no difference measured there).
# Only where all of B fits L1 (`ROWS_FIRST_BYTES`; that gradient's 64x100 float32 is 25 KB):
# a wide B (the router's thin-depth products, k <= 16 and n >= 4096) would stream from L2 for
# every row tile, where the panel order keeps a few-KB panel in L1.
K_BLOCK_AVX2 = 256
ROWS_FIRST_BYTES = 32 * 1024


def k_block(dtype: str) -> int:
    """Rows of K summed in registers before the partial sums are added to C (0: all of K),
    chosen by the instruction set the kernel is compiled for (asked once per process,
    template_panels._has_avx512): `K_BLOCK_AVX2` for the 16-register tile, 0 with AVX-512."""
    return 0 if template_panels._has_avx512() else K_BLOCK_AVX2


# Rows of the tiles of the columns past the whole panels (one vector or narrower: one
# accumulator per row): the AVX2 tile's 4 rows give 4 chains of dependent FMAs, which the
# FMAs' latency (4 cycles, 2 a cycle) holds to half the rate, 8 give enough (10 of the 16
# registers). The step's products have 100 columns: 4 panels of 24 and a rest of 4, whose
# 4-row tiles took ~4 of the ~28 cycles of each row of K for 4% of the work. AVX-512's tile
# has 8 rows already.
def rest_rows(dtype: str) -> int:
    """Rows of the rest tiles (see above): twice the AVX2 tile's, AVX-512's own."""
    gmr = tile_shape(dtype)[1]
    return gmr if template_panels._has_avx512() else 2 * gmr


def _rest_widths(gv: int) -> list:
    """The narrower vectors a column rest is made of: powers of two below GV, widest first."""
    out, w = [], gv // 2
    while w >= 1:
        out.append(w)
        w //= 2
    return out


# a (flat): A's element (i, k) at i*ars + k*aks; b (K, N) and c (M, N) C-contiguous, flat.
_TILES = """

GV, GMR, GNV, KC, RMR = {GV}, {GMR}, {GNV}, {KC}, {RMR}
ROWS_FIRST = {ROWS_FIRST}
_main = _make_tile(GMR, (GV,) * GNV, True)
_main1 = _make_tile(1, (GV,) * GNV, True)
_one = _make_tile(RMR, (GV,), True)
_one1 = _make_tile(1, (GV,), True)
# {rest_tiles}
"""

# c (+)= a[:, kb:kb+kc] @ b[kb:kb+kc] from column j on (past the whole panels): one-vector
# tiles, then narrower ones, of RMR rows (`rest_rows`), then the rows past them one at a time
# (ka = kb * aks, kbo = kb * n)
_RESTS_BODY = """
    mt = m - m % RMR
    while j + GV <= n:
        for i in range(0, mt, RMR):
            _one(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        for i in range(mt, m):
            _one1(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        j += GV
    # {rest_loops}
"""

# c (+)= a[:, kb:kb+kc] @ b[kb:kb+kc]: the column panels, then the rests (RESTS)
_PART_BODY = """
    mt = m - m % GMR
    ka, kbo = kb * aks, kb * n
    j = 0
    while j + GNV * GV <= n:
        for i in range(0, mt, GMR):
            _main(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        for i in range(mt, m):
            _main1(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        j += GNV * GV
RESTS"""

# The kernel where all of K is summed at once (KC 0: the AVX-512 tile): one function, `_PART_BODY`
# and `_RESTS_BODY` written into it. Why not the helpers of `_BLOCKED` inlined by numba
# (inline='always'): numba's inlining pass took 0.17-0.24 s of the module's 0.65-0.78 s compile
# (it compiles the helpers' IR again for each of their four call sites, three of them in
# branches LLVM then drops for KC 0); written out once, 0.42-0.54 s. The same loops, the same
# bits.
_WHOLE_K = """
{kernel_jit}
def kernel(a, ars, aks, m, kd, b, n, c):
    kb, kc, keep = 0, kd, False
PART"""

# The kernel that sums K in blocks of KC (`k_block`: the AVX2 tile), or a row tile at a time
# across all its column panels (`_by_rows`).
_BLOCKED = """

@njit(inline='always')
def _rests(a, ars, aks, m, b, n, c, kb, kc, keep, j):
    ka, kbo = kb * aks, kb * n
RESTS

@njit(inline='always')
def _part(a, ars, aks, m, b, n, c, kb, kc, keep):
PART

@njit(inline='always')
def _by_rows(a, ars, aks, m, kd, b, n, c):
    # c = a @ b a row tile at a time across all its column panels before the next (K in one
    # block: the tile's rows of A stay in L1 across them; the same sums as `_part`'s)
    mt = m - m % GMR
    for i in range(0, mt, GMR):
        j = 0
        while j + GNV * GV <= n:
            _main(a, i * ars, ars, aks, b, j, n, c, i * n + j, n, kd, False)
            j += GNV * GV
    for i in range(mt, m):
        j = 0
        while j + GNV * GV <= n:
            _main1(a, i * ars, ars, aks, b, j, n, c, i * n + j, n, kd, False)
            j += GNV * GV
    _rests(a, ars, aks, m, b, n, c, 0, kd, False, n - n % (GNV * GV))


{kernel_jit}
def kernel(a, ars, aks, m, kd, b, n, c):
    if kd <= KC and kd * n <= ROWS_FIRST:
        _by_rows(a, ars, aks, m, kd, b, n, c)
    else:   # K in blocks of KC (`k_block`), each added to the sums before it
        for kb in range(0, kd, KC):
            _part(a, ars, aks, m, b, n, c, kb, min(KC, kd - kb), kb > 0)
"""

# `kernel`'s decorator: compiled on its own, for Python's calls (`product`) and for compiler/cpu/gemm/halves.py's
# product half, which calls it by address (`kernel_import`).
_STANDALONE = ("""@njit("void(Array({t}, 1, 'C', readonly=True), int64, int64, int64, int64, "
      "Array({t}, 1, 'C', readonly=True), int64, {t}[::1])", cache=CACHE, boundscheck=False, nogil=True)""")

_REST_TILES = """
_rest{w} = _make_tile(RMR, ({w},), True)
_rest{w}_1 = _make_tile(1, ({w},), True)"""

_REST_LOOP = """
    if n - j >= {w}:
        for i in range(0, mt, RMR):
            _rest{w}(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        for i in range(mt, m):
            _rest{w}_1(a, i * ars + ka, ars, aks, b, kbo + j, n, c, i * n + j, n, kc, keep)
        j += {w}"""


def source(dtype: str) -> str:
    """The kernel module's source for `dtype` with this CPU's tile."""
    gv, gmr, gnv = tile_shape(dtype)
    rests = _rest_widths(gv)
    kc = k_block(dtype)
    rest_body = _RESTS_BODY.replace("    # {rest_loops}", "".join(_REST_LOOP.replace("{w}", str(w)) for w in rests))
    part = _PART_BODY.strip("\n")
    if kc == 0:    # (`_WHOLE_K`: the rests follow the panels in the same function)
        kernel = _WHOLE_K.replace("PART", part.replace("RESTS", rest_body.strip("\n")))
    else:
        kernel = (_BLOCKED.replace("RESTS", rest_body.strip("\n"))
                  .replace("PART", part.replace("RESTS", "    _rests(a, ars, aks, m, b, n, c, kb, kc, keep, j)")))
    driver = ((_TILES + kernel).replace("{kernel_jit}", _STANDALONE)
              .replace("# {rest_tiles}", "".join(_REST_TILES.replace("{w}", str(w)) for w in rests))
              .replace("{GV}", str(gv)).replace("{GMR}", str(gmr)).replace("{GNV}", str(gnv))
              .replace("{KC}", str(kc)).replace("{RMR}", str(rest_rows(dtype)))
              .replace("{ROWS_FIRST}", str(ROWS_FIRST_BYTES // (4 if dtype == "float32" else 8))))
    head = template_panels.tiles_source(dtype, template.Config(gmr, gnv))
    return (head + driver).replace("{t}", dtype)


def kernel_module(dtype: str, digest: str):
    """This module's kernel module for `dtype`, loaded (compiled into the disk cache on its
    first use in the process), for compiler/cpu/gemm/halves.py's module, whose product half calls its
    `kernel` by address (`kernel_import`; `template_panels.load_by_digest`: `digest` is that of the
    source the importer was made with)."""
    # (the name `module_kernel`'s NativeKernel loads it under: one module, one disk entry)
    return template_panels.load_by_digest(source(dtype), digest, f"native_rows_gemm_{dtype}",
                                      f"rows_gemm.kernel_module: the kernel's source for {dtype}")


def kernel_import(dtype: str) -> str:
    """Source lines that give a module `gemm_kernel`, this module's compiled kernel for `dtype`
    (`kernel_module`); the kernel's digest is in them, so a changed kernel changes the
    importer's source (and disk cache key) too."""
    return (f"from tracejit.compiler.cpu.gemm.rows_gemm import kernel_module as _kernel_module\n"
            f"gemm_kernel = _kernel_module({dtype!r}, {template_panels.source_digest(source(dtype))!r}).kernel\n")


def _strides(a) -> tuple | None:
    """(flat a, ars, aks) for a row-major `a` or a transposed view of one, else None."""
    m, k = a.shape
    if a.flags.c_contiguous:
        return a.reshape(-1), k, 1
    if a.flags.f_contiguous:
        return a.T.reshape(-1), 1, m
    return None


def product(a, b, thin: bool = False):
    """``a @ b`` by the register-tile kernel, or None (run numpy's product): 2-D float32 or
    float64 numpy arrays of one dtype, a C- or F-contiguous (a transposed view), the shape
    past `MIN_MNK` and `MIN_DEPTH`, and the kernel loaded. A C-contiguous b runs as it is
    (past `MIN_COLUMNS`); an F-contiguous one (``x @ w.T``, nn.Linear's layout) runs as
    ``(b.T @ a.T).T`` when a has `T_MIN_ROWS` to `T_MAX_ROWS` rows (`_transposed`).
    ``thin``: any depth (router.matmul's products of at most `THIN_DEPTH`, see there).
    (The checks are written out: native.takes and ``dtype.name`` cost 2.4 us of a call.)"""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim != 2 or b.ndim != 2:
        return None
    m, kd = a.shape
    n = b.shape[1]
    if (kd < MIN_DEPTH and not thin) or m * kd * n < MIN_MNK:
        return None
    if b.flags.c_contiguous:
        if n < MIN_COLUMNS:
            return None
        transposed = False
    elif b.flags.f_contiguous and T_MIN_ROWS <= m <= T_MAX_ROWS:
        transposed = True
    else:
        return None
    dtype = a.dtype
    t = _NAMES.get(dtype)
    if t is None or b.dtype != dtype:
        return None
    flat = _strides(a)
    if flat is None:
        return None
    fn = _loaded.get(t)
    if fn is None:
        fn = module_kernel(t).get()
        if fn is None:
            return None
        _loaded[t] = fn
    if transposed:
        return _transposed(fn, a, b, m, kd, n)
    af, ars, aks = flat
    out = np.empty((m, n), dtype)
    fn(af, ars, aks, m, kd, b.reshape(-1), n, out.reshape(-1))
    return out


def _transposed(fn, a, b, m, kd, n):
    """``a @ b`` for an F-contiguous b (the transpose of a row-major w: ``x @ w.T``) as
    ``c.T = w @ a.T``: w's rows are the kernel's rows (read in place, as a row-major a),
    a.T (kd x m, made C-contiguous: a copy of the few-row a unless a is a transposed view
    itself) its columns, and c.T is copied back C-contiguous, the layout numpy's product
    returns. Packing w.T instead would copy all of the weights: a x @ w.T of 64x1000x100
    float32 took 98/115 us (min/median) that way against 108/127 (one thread, load 3),
    32x1024x200 269/309 against 130/156, 16x2048x200 536/605 against 94/111 (linear2.py)."""
    at = a.T if a.flags.f_contiguous else np.ascontiguousarray(a.T)
    ct = np.empty((n, m), a.dtype)
    fn(b.T.reshape(-1), kd, 1, n, kd, at.reshape(-1), m, ct.reshape(-1))
    return np.ascontiguousarray(ct.T)


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}
_loaded: dict = {}   # dtype name -> the loaded kernel


def module_kernel(t: str):
    """The `loader.NativeKernel` of dtype name `t`'s kernel module (loaded from disk only in
    sync mode: ``sync_compiles=False``): the one place its key and source are named."""
    return _kernel(("rows_gemm", t), lambda: source(t), sync_compiles=False)
