"""The GEMM template's packed-operand option, with entry points that compiled loops call by address.

What: the template's register tiles (compiler/cpu/gemm/template_text.py `_make_tile`, with its
``keep`` argument: c (+)= the sums where a run-time beta says) rendered into one module per
dtype whose functions have fixed signatures, for numba code that runs a product at every
step of its own loop without returning to Python (the recurrent layers' time loops,
compiler/cpu/kernels/lstm_kernels.py): they call them through their addresses
(compiler/cpu/runtime/voidptr.py `call_at`), so the tiles are compiled once per process,
in this module, not inlined into every loop kernel.

- ``panel_pack(w, wp, p0, p1, k0, kd)`` / ``panel_pack_t``: the packed-operand option. A
  left operand used at every step (a layer's weights) is packed once per call into panels
  of MR rows, k-major (panel p holds rows p*MR .. p*MR+MR-1, each k's MR values adjacent;
  rows past m zero), from w (m, k) or from w^T read along its rows, as columns k0.. of a
  packed matrix kd wide (the panels of [W_ih | W_hh] from both, no concatenated copy).
- ``panel_product(wp, p0, p1, kd, k0, k1, b, c, beta)``: c's rows p0*MR .. p1*MR-1 (+)=
  the packed operand's columns k0..k1-1 @ b (their rows): b's rows read in place, nothing
  packed per step. c has room for the padding rows (`panel_rows`).
- ``row_product(a, i0, i1, b, c, beta)``: c[i0:i1] (+)= a[i0:i1] @ b, a row-major read in
  place (a weight gradient's dg @ h^T step by step).

One driver (`_rows`) runs all three products: column panels of NV vectors outermost (b's
panel stays in cache across the row tiles), then one-vector and narrower power-of-two
column rests, whole tiles of MR rows, then single rows. The configuration is fixed per
instruction set (`panel_config`): the state block a step multiplies has the batch's few
columns (32 for the LSTM LM), so two vectors of columns; MR rows as many as the register
file holds beside them (8 with AVX-512's 32 registers, 4 with AVX2's 16). LSTM LM step,
1024x256 @ 256x32 float32 on one thread: ~100 us against OpenBLAS's ~150 (which packs
both operands at every call).

Results differ from BLAS's in the last bits (another summation order), as BLAS's own do
between thread counts; the same sums whatever rows a caller's thread takes.
"""
from __future__ import annotations

import hashlib

from . import template, template_text
from .template import _has_avx512

__all__ = ["panel_config", "vector_width", "tiles_source", "panel_source", "panel_module", "panel_import",
           "panel_rows", "panel_size", "source_digest", "load_by_digest"]


def panel_config(dtype: str) -> template.Config:
    """The template configuration of the panel products (see the module's docstring)."""
    return template.Config(8 if _has_avx512() else 4, 2)


def vector_width(dtype: str) -> int:
    """Lanes of the widest vector the panels are compiled for: 64 bytes with AVX-512, else 32."""
    return (64 if _has_avx512() else 32) // (4 if dtype == "float32" else 8)


# Bytes of B below which `_rows` runs a row tile across all column panels first: an L1 data
# cache (32-48 KB). The LSTM LM's in-loop weight gradient (dg 1024x32 @ h^T 32x256 float32, 32
# KB of B, a step of the compiled step's backward) re-read its 128 KB of dg from L2 once per
# column panel in panel order.
ROWS_FIRST_BYTES = 32 * 1024

# the driver of the products: `_rows` on the keep tiles of the configuration
_ROWS = '''
_pk = _make_tile(MR, (V,) * NV, True)
_pk1 = _make_tile(1, (V,) * NV, True)
{rest_tiles}


ROWS_FIRST = {rows_first}


@njit(inline='always')
def _rows(A, ao, ats, ars, aks, B, bo, ldb, C, co, ldc, m, n, k, beta):
    # C[co + i*ldc + j] (+)= sum over p < k of A(i, p) * B[bo + p*ldb + j], i < m, j < n:
    # A's row i = t*MR + r at ao + t*ats + r*ars, its p-th value p*aks further. Where all of
    # B fits in L1 (ROWS_FIRST elements), a row tile across all column panels before the
    # next (its rows of A stay in L1 too), else each column panel down all row tiles (B's
    # panel stays in cache): the same sums either way
    step = MR if k * n <= ROWS_FIRST else m
    i0 = 0
    while i0 < m:
        i1 = min(m, i0 + step)
        mt = i1 - (i1 - i0) % MR
        j = 0
        while j + NR <= n:
            for i in range(i0, mt, MR):
                _pk(A, ao + (i // MR) * ats, ars, aks, B, bo + j, ldb, C, co + i * ldc + j, ldc, k, beta)
            for i in range(mt, i1):
                _pk1(A, ao + (i // MR) * ats + (i % MR) * ars, ars, aks, B, bo + j, ldb, C, co + i * ldc + j,
                     ldc, k, beta)
            j += NR
{rest_loops}
        i0 = i1
'''

_PANEL_ENTRIES = '''

@njit("void({dtype}[::1], int64, int64, int64, int64, int64, Array({dtype}, 2, 'C', readonly=True), "
      "{dtype}[:, ::1], boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True,
      no_rewrites=True)
def panel_product(wp, p0, p1, kd, k0, k1, b, c, beta):
    n = b.shape[1]
    _rows(wp, (p0 * kd + k0) * MR, kd * MR, 1, MR, b, 0, n, c, p0 * MR * c.shape[1], c.shape[1],
          (p1 - p0) * MR, n, k1 - k0, beta)


@njit("void(Array({dtype}, 2, 'C', readonly=True), int64, int64, Array({dtype}, 2, 'C', readonly=True), "
      "{dtype}[:, ::1], boolean)", cache=CACHE, error_model='numpy', boundscheck=False, nogil=True,
      no_rewrites=True)
def row_product(a, i0, i1, b, c, beta):
    ka = a.shape[1]
    _rows(a, i0 * ka, MR * ka, ka, 1, b, 0, b.shape[1], c, i0 * c.shape[1], c.shape[1], i1 - i0, b.shape[1],
          ka, beta)


@njit(inline='always')
def _pack(w, wp, trans, p0, p1, k0, kd):
    if trans:
        kw, m = w.shape
    else:
        m, kw = w.shape
    for p in range(p0, p1):
        for q in range(kw):
            base = (p * kd + k0 + q) * MR
            for r in range(MR):
                i = p * MR + r
                if i >= m:
                    wp[base + r] = z
                else:
                    wp[base + r] = w[q, i] if trans else w[i, q]


# (no CPython wrappers: called by address only; a wrapper is ~0.12 s of compile each)
@njit("void(Array({dtype}, 2, 'C', readonly=True), {dtype}[::1], int64, int64, int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_pack(w, wp, p0, p1, k0, kd):
    _pack(w, wp, False, p0, p1, k0, kd)


@njit("void(Array({dtype}, 2, 'C', readonly=True), {dtype}[::1], int64, int64, int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True, no_rewrites=True, no_cpython_wrapper=True)
def panel_pack_t(w, wp, p0, p1, k0, kd):
    _pack(w, wp, True, p0, p1, k0, kd)
'''


def _rest_widths(v: int) -> list:
    out, w = [], v
    while w >= 1:
        out.append(w)
        w //= 2
    return out


def panel_source(dtype: str) -> str:
    """The panel module's source for `dtype` (this CPU's configuration)."""
    head = f"# tracejit's GEMM template panels for {dtype} (tracejit/compiler/cpu/gemm/template_panels.py)\n"
    return head + _rows_source(dtype, panel_config(dtype)) + _PANEL_ENTRIES.replace("{dtype}", dtype)


def _rows_source(dtype: str, cfg: template.Config) -> str:
    """The tiles of `cfg` and the `_rows` driver on them."""
    v = vector_width(dtype)
    widths = _rest_widths(v)
    tiles = "\n".join(f"_pr{w} = _make_tile(MR, ({w},), True)\n_pr{w}1 = _make_tile(1, ({w},), True)"
                      for w in widths)
    loops = []
    for w in widths:   # (one vector as often as it fits, then each narrower width once)
        loops.append(f"        {'while' if w == v else 'if'} j + {w} <= n:\n"
                     f"            for i in range(i0, mt, MR):\n"
                     f"                _pr{w}(A, ao + (i // MR) * ats, ars, aks, B, bo + j, ldb, C, co + i * ldc + j, "
                     f"ldc, k, beta)\n"
                     f"            for i in range(mt, i1):\n"
                     f"                _pr{w}1(A, ao + (i // MR) * ats + (i % MR) * ars, ars, aks, B, bo + j, ldb, C, "
                     f"co + i * ldc + j, ldc, k, beta)\n"
                     f"            j += {w}")
    rows_first = ROWS_FIRST_BYTES // (4 if dtype == "float32" else 8)
    return tiles_source(dtype, cfg) + (_ROWS.replace("{rest_tiles}", tiles).replace("{rest_loops}", "\n".join(loops))
                                       .replace("{rows_first}", str(rows_first)))


def tiles_source(dtype: str, cfg: template.Config) -> str:
    """The template's register tiles (`_make_tile`, the configuration's constants MR, NV, V,
    NR) as the head of a module that builds its own loops on them."""
    return (template_text.TILES.replace("{rest_tiles}", "").replace("{dtype}", dtype).replace("{mr}", str(cfg.mr))
            .replace("{nv}", str(cfg.nv)).replace("{v}", str(vector_width(dtype)))
            .replace("{dot}", str(bool(cfg.dot))))


def source_digest(source: str) -> str:
    """A short digest of a shared module's source, put in its importers' sources (`load_by_digest`)."""
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def load_by_digest(source: str, digest: str, name_hint: str, what: str):
    """The loaded module of `source` (compiled into the disk cache on its first use in the
    process), for a kernel module that calls its functions by address; `digest` is that of the
    source the importer was made with (`source_digest`): one made against another source
    (another tile, another version) must not load, since it would call the functions at their
    addresses with that one's arguments. `what` names the shared module in the error."""
    from ... import diskcache
    if source_digest(source) != digest:
        raise RuntimeError(f"{what} changed (digest {source_digest(source)}, the importer's {digest})")
    return diskcache.load_module(source, name_hint=name_hint)


def panel_module(dtype: str, digest: str):
    """The loaded panel module for `dtype` (`load_by_digest`: `digest` is that of the source
    the importing kernel was made with)."""
    return load_by_digest(panel_source(dtype), digest, f"gemm_panels_{dtype}",
                          f"template_panels.panel_module: the panels' source for {dtype}")


def panel_import(dtype: str) -> str:
    """Source lines that give a kernel module `panel_product`, `row_product`, `panel_pack`,
    `panel_pack_t` (from `panel_module`), `call_at`, `native_address` and ``PMR`` (the panels'
    rows); the panels' digest is in them, so a changed template changes the kernel's source
    (and disk cache key) too."""
    return (f"\nfrom tracejit.compiler.cpu.runtime.voidptr import call_at, native_address\n"
            f"from tracejit.compiler.cpu.gemm.template_panels import panel_module as _panel_module\n"
            f"_panels = _panel_module({dtype!r}, {source_digest(panel_source(dtype))!r})\n"
            f"panel_product, row_product, panel_pack, panel_pack_t = _panels.panel_product, "
            f"_panels.row_product, _panels.panel_pack, _panels.panel_pack_t\n"
            f"PMR = {panel_config(dtype).mr}\n")


def panel_rows(m: int, dtype: str) -> int:
    """Rows of a `panel_product` output for m rows of the packed operand (a multiple of MR)."""
    mr = panel_config(dtype).mr
    return -(-m // mr) * mr


def panel_size(m: int, k: int, dtype: str) -> int:
    """Elements of the packed panels of an (m, k) operand."""
    return panel_rows(m, dtype) * k
