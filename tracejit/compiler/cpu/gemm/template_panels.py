"""The GEMM template's packed-operand option, with entry points that compiled loops call by address.

The template's register tiles rendered into one module per dtype with fixed signatures,
for numba loops that run a product at every step (the recurrent layers): they call them
through their addresses (voidptr `call_at`), so the tiles compile once per process.

- ``panel_pack(w, wp, p0, p1, k0, kd)`` / ``panel_pack_t``: pack a left operand used at
  every step (a layer's weights) once per call into k-major panels of MR rows (rows past m
  zero), from w or w^T, as columns k0.. of a packed matrix kd wide.
- ``panel_product(wp, p0, p1, kd, k0, k1, b, c, beta)``: c's rows p0*MR .. p1*MR-1 (+)=
  the packed columns k0..k1-1 @ b, b's rows read in place.
- ``row_product(a, i0, i1, b, c, beta)``: c[i0:i1] (+)= a[i0:i1] @ b, a read in place.

One driver (`_rows`) runs all three: column panels outermost, then narrower column rests,
whole MR-row tiles, then single rows. The configuration is fixed per instruction set
(`panel_config`: two vectors of columns, MR = 8 with AVX-512, 4 with AVX2): the LSTM LM's
1024x256 @ 256x32 takes ~100 us against OpenBLAS's ~150. Results differ from BLAS's in
the last bits, the same whatever rows a caller's thread takes.
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


# Bytes of B below which `_rows` runs a row tile across all column panels first (an L1
# data cache): else the in-loop weight gradient re-read its dg from L2 once per panel.
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


def panel_source(dtype: str) -> str:
    """The panel module's source for `dtype` (this CPU's configuration)."""
    head = f"# tracejit's GEMM template panels for {dtype} (tracejit/compiler/cpu/gemm/template_panels.py)\n"
    return head + _rows_source(dtype, panel_config(dtype)) + _PANEL_ENTRIES.replace("{dtype}", dtype)


def _rows_source(dtype: str, cfg: template.Config) -> str:
    """The tiles of `cfg` and the `_rows` driver on them."""
    v = vector_width(dtype)
    widths = template.rest_widths(v)
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
    """The loaded module of `source`, for a kernel module that calls its functions by
    address; `digest` is that of the source the importer was made with (`source_digest`):
    one made against another source must not load. `what` names it in the error."""
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
    """Source lines that give a kernel module the panel functions, `call_at`,
    `native_address` and ``PMR``; the panels' digest is in them, so a changed template
    changes the kernel's disk cache key too."""
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
