"""compiler/cpu/gemm/packed_gemm.py's numba helpers against numpy: the per-step GEMM on packed weights
(whole register tiles of both widths, the scalar column rest, row padding, beta 0 and 1;
weights packed from their rows or their transpose's)
and the register-block transpose (whole blocks and both edges, written and added); and the
parts of both one thread of a split loop does (a range of panels, a rectangle of the
transpose), which touch nothing outside their part."""
import numpy as np
import pytest

from tracejit.compiler.cpu.gemm import packed_gemm

pytest.importorskip("numba", reason="the helpers are numba code")

_DRIVERS = '''
import numpy as np
from numba import njit
CACHE = False
''' + packed_gemm.PACKED_SOURCE + '''

@njit
def pack(w, wp, trans):
    pack_panels(w, wp, trans)


@njit
def gemm(wp, m, k, b, c, beta):
    packed_gemm(wp, m, k, b, c, beta)


@njit
def transpose(src, dst, add):
    transpose_blocks(src, dst, add)


@njit
def pack_range(w, wp, trans, p0, p1):
    pack_panel_range(w, wp, trans, p0, p1)


@njit
def gemm_panels(wp, p0, p1, k, b, c, beta):
    packed_gemm_panels(wp, p0, p1, k, b, c, beta)


@njit
def transpose_part_(src, i0, i1, j0, j1, dst, add):
    transpose_part(src, i0, i1, j0, j1, dst, add)


@njit
def scalar_rows(w, b, c, j0, beta):
    # columns j0.. of c (+)= w b element by element, s = 0, s += w b in k order, then s + c
    # (the scalar loop the column rest replaced: the bits it must keep)
    for i in range(w.shape[0]):
        for q in range(j0, b.shape[1]):
            s = w.dtype.type(0)
            for k in range(w.shape[1]):
                s += w[i, k] * b[k, q]
            c[i, q] = s + c[i, q] if beta else s
''' + packed_gemm.PRODUCT_SOURCE + '''

from tracejit.compiler.cpu.runtime.voidptr import call_at, native_address


@njit
def pack_columns(w, wp, trans, p0, p1, k0, kd):
    pack_panel_columns(w, wp, trans, p0, p1, k0, kd)


@njit
def packs_by_address(fns, w, wp, trans, p0, p1, k0, kd):
    # the loops' call of the shared packs (compiler/cpu/kernels/lstm_kernels.py): through their addresses
    if trans:
        call_at(fns[1], panel_pack_t, (w, wp, p0, p1, k0, kd))
    else:
        call_at(fns[0], panel_pack, (w, wp, p0, p1, k0, kd))


@njit
def transpose_by_address(fns, src, i0, i1, j0, j1, dst, add):
    # the loops' call of the shared transpose (compiler/cpu/kernels/lstm_kernels.py): through its address
    call_at(fns[2], panel_transpose, (src, i0, i1, j0, j1, dst, add))
'''
_mods: dict = {}


def _mod(dtype: str) -> dict:
    """The drivers compiled with the tile `packed_gemm` picks now (see the `tile` fixture)."""
    key = (dtype, packed_gemm.tile_shape(dtype))
    if key not in _mods:
        src = packed_gemm.with_tile(_DRIVERS, dtype).replace("{t}", dtype)
        ns: dict = {}
        exec(compile(src, f"<packed_gemm {dtype}>", "exec"), ns)
        _mods[key] = ns
    return _mods[key]


@pytest.fixture(params=[True, False], ids=["avx512-tile", "avx2-tile"])
def tile(request, monkeypatch):
    """Both register tiles on every machine (LLVM splits or joins the vectors for the CPU it
    compiles for), so an AVX-512 CI machine also checks the tile AVX2 machines run."""
    monkeypatch.setattr(packed_gemm, "_has_avx512", lambda: request.param)
    return request.param


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [61, 3, 40])
def test_column_rest_keeps_the_scalar_loops_bits(dtype, n, tile):
    """The columns past the vector tiles (a one-column tile of multiplies and adds) equal the
    scalar loop's result bit for bit, beta 0 and 1, with nan, inf and -0 among the inputs; the
    by-address `panel_product` (PRODUCT_SOURCE) equals `packed_gemm_panels` bit for bit."""
    ns = _mod(dtype)
    V = packed_gemm.tile_shape(dtype)[0]
    j0 = n - n % V
    r = np.random.default_rng(4)
    m, k = 19, 23
    w, b = r.standard_normal((m, k)).astype(dtype), r.standard_normal((k, n)).astype(dtype)
    w[3, 4], w[5, :] = np.nan, -0.0
    b[2, -1], b[6, -2] = np.inf, -np.inf
    wp = np.empty(packed_gemm.packed_size(m, k, dtype), dtype)
    ns["pack"](w, wp, False)
    rows = packed_gemm.padded_rows(m, dtype)
    for beta in (False, True):
        c0 = r.standard_normal((rows, n)).astype(dtype)
        c0[1, -1] = -0.0
        got, want, by_address = c0.copy(), c0.copy(), c0.copy()
        ns["gemm"](wp, m, k, b, got, beta)
        ns["scalar_rows"](w, b, want, j0, beta)
        np.testing.assert_array_equal(got[:m, j0:].view(np.uint8), want[:m, j0:].view(np.uint8))
        ns["panel_product"](wp, 0, rows // packed_gemm.tile_shape(dtype)[1], k, 0, k, b, by_address, beta)
        np.testing.assert_array_equal(by_address.view(np.uint8), got.view(np.uint8))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(16, 8, 61), (9, 36, 61), (3, 5, 2), (40, 7, 16), (1024, 256, 32)])
def test_packed_gemm_equals_numpy(dtype, m, k, n, tile):
    """n = 61: tiles of two vectors and of one, then a scalar rest, at every vector width
    (AVX-512 or not, float32 or float64); m = 9, 3: rows padded to the tile's."""
    ns = _mod(dtype)
    r = np.random.default_rng(0)
    w, b = r.standard_normal((m, k)).astype(dtype), r.standard_normal((k, n)).astype(dtype)
    wp = np.empty(packed_gemm.packed_size(m, k, dtype), dtype)
    ns["pack"](w, wp, False)
    rows = packed_gemm.padded_rows(m, dtype)
    assert rows % packed_gemm.tile_shape(dtype)[1] == 0 and rows >= m
    c = np.full((rows, n), np.nan, dtype)          # beta 0 ignores what c held
    ns["gemm"](wp, m, k, b, c, False)
    ref = w.astype(np.float64) @ b
    np.testing.assert_allclose(c[:m], ref, **_tol(dtype, k))
    c0 = r.standard_normal((rows, n)).astype(dtype)
    c1 = c0.copy()
    ns["gemm"](wp, m, k, b, c1, True)
    np.testing.assert_allclose(c1[:m], ref + c0[:m], **_tol(dtype, k))
    wtp = np.empty_like(wp)                        # the same panels from w^T's rows
    ns["pack"](np.ascontiguousarray(w.T), wtp, True)
    np.testing.assert_array_equal(wtp, wp)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows,cols", [(32, 1024), (1024, 32), (5, 37), (40, 19), (17, 17)])
def test_transpose_blocks_equals_numpy(dtype, rows, cols, tile):
    ns = _mod(dtype)
    r = np.random.default_rng(1)
    src = r.standard_normal((rows, cols)).astype(dtype)
    dst = r.standard_normal((cols, rows)).astype(dtype)
    before = dst.copy()
    ns["transpose"](src, dst, True)
    np.testing.assert_array_equal(dst, before + src.T)
    ns["transpose"](src, dst, False)
    np.testing.assert_array_equal(dst, src.T)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_panel_ranges_pack_and_multiply_only_their_rows(dtype, tile):
    """A thread's panels p0..p1 (packing and GEMM) give exactly those rows of the whole."""
    ns = _mod(dtype)
    mr = packed_gemm.tile_shape(dtype)[1]
    m, k, n = 6 * mr, 19, 61
    r = np.random.default_rng(2)
    w, b = r.standard_normal((m, k)).astype(dtype), r.standard_normal((k, n)).astype(dtype)
    whole = np.empty(packed_gemm.packed_size(m, k, dtype), dtype)
    ns["pack"](w, whole, False)
    c_whole = np.empty((m, n), dtype)
    ns["gemm"](whole, m, k, b, c_whole, False)
    for trans in (False, True):
        wp = np.full_like(whole, np.nan)
        ns["pack_range"](np.ascontiguousarray(w.T) if trans else w, wp, trans, 2, 5)
        part = slice(2 * mr * k, 5 * mr * k)
        np.testing.assert_array_equal(wp[part], whole[part])
        assert np.isnan(np.delete(wp, np.arange(part.start, part.stop))).all()   # nothing else written
    c = np.full((m, n), np.nan, dtype)
    ns["gemm_panels"](whole, 2, 5, k, b, c, False)
    np.testing.assert_array_equal(c[2 * mr:5 * mr], c_whole[2 * mr:5 * mr])
    assert np.isnan(c[:2 * mr]).all() and np.isnan(c[5 * mr:]).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("i0,i1,j0,j1", [(0, 32, 16, 48), (16, 48, 0, 32), (3, 21, 5, 40), (16, 64, 32, 53)])
def test_transpose_part_writes_only_its_rectangle(dtype, i0, i1, j0, j1, tile):
    ns = _mod(dtype)
    r = np.random.default_rng(3)
    src = r.standard_normal((64, 64)).astype(dtype)
    for add in (False, True):
        dst = r.standard_normal((64, 64)).astype(dtype)
        want = dst.copy()
        want[j0:j1, i0:i1] = src[i0:i1, j0:j1].T + (want[j0:j1, i0:i1] if add else 0)
        ns["transpose_part_"](src, i0, i1, j0, j1, dst, add)
        np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transpose_by_address_equals_the_inlined_transpose(dtype, tile):
    """`panel_transpose` (PRODUCT_SOURCE, called by address as the recurrent loops call it)
    writes what the inlined `transpose_part` writes, bit for bit: whole register blocks and
    the edges, a read-only source and a writable one (the loops pass both), set and add,
    nothing outside the rectangle touched."""
    ns = _mod(dtype)
    v = packed_gemm.tile_shape(dtype)[0]
    fns = np.array([ns["native_address"](ns[f]) for f in ("panel_pack", "panel_pack_t", "panel_transpose")],
                   np.int64)
    r = np.random.default_rng(11)
    for rows, cols, i0, i1, j0, j1 in ((4 * v + 3, 2 * v + 5, 0, 4 * v + 3, 0, 2 * v + 5),
                                       (4 * v, 3 * v, v, 3 * v, 0, 2 * v + 1), (7, 5, 1, 6, 2, 5)):
        src = r.standard_normal((rows, cols)).astype(dtype)
        src[0, 0] = -0.0
        for readonly in (False, True):
            src.flags.writeable = not readonly
            for add in (False, True):
                base = r.standard_normal((cols, rows)).astype(dtype)
                want, got = base.copy(), base.copy()
                ns["transpose_part_"](src, i0, i1, j0, j1, want, add)
                ns["transpose_by_address"](fns, src, i0, i1, j0, j1, got, add)
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
                outside = np.ones(base.shape, bool)
                outside[j0:j1, i0:i1] = False
                np.testing.assert_array_equal(got[outside], base[outside])
                if not add:
                    np.testing.assert_array_equal(got[j0:j1, i0:i1], src[i0:i1, j0:j1].T)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans", [False, True])
def test_packs_by_address_equal_the_inlined_pack(dtype, trans, tile):
    """`panel_pack` and `panel_pack_t` (PRODUCT_SOURCE, called by address as the recurrent
    loops call them) write what `pack_panel_columns` writes, element for element: a part of
    the panels (p0..p1-1) as columns k0.. of a wider packed matrix, the padding rows zero,
    nothing outside the part touched."""
    ns = _mod(dtype)
    mr = packed_gemm.tile_shape(dtype)[1]
    fns = np.array([ns["native_address"](ns["panel_pack"]), ns["native_address"](ns["panel_pack_t"])], np.int64)
    r = np.random.default_rng(7)
    for m, k in ((3 * mr + 5, 7), (2 * mr, 1), (mr - 3, 4)):
        w = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
        w[0, -1] = -0.0
        w.flags.writeable = False
        kd = k + 3
        panels = (m + mr - 1) // mr
        for p0, p1, k0 in ((0, panels, 0), (1 if panels > 1 else 0, panels, 3)):
            want = np.full(panels * mr * kd, np.nan, dtype)
            got = want.copy()
            ns["pack_columns"](w, want, trans, p0, p1, k0, kd)
            ns["packs_by_address"](fns, w, got, trans, p0, p1, k0, kd)
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
            assert np.isnan(got).any()      # (the columns outside k0..k0+k-1 untouched)


def test_a_shared_module_with_another_digest_is_refused_by_name(monkeypatch):
    # An importer made against another source (another tile, another version) would call the
    # shared functions by address with that one's arguments: the load is refused before any
    # compile or disk read, naming the module and both digests.
    from tracejit.compiler import diskcache
    monkeypatch.setattr(diskcache, "load_module", lambda *a, **k: pytest.fail("loaded"))
    good = packed_gemm.source_digest(packed_gemm.product_source("float32"))
    with pytest.raises(RuntimeError, match=r"packed_gemm.product_module: the product's source "
                                           r"for float32 changed \(digest " + good):
        packed_gemm.product_module("float32", "0" * 20)
    from tracejit.compiler.cpu.gemm import rows_gemm
    with pytest.raises(RuntimeError, match=r"rows_gemm.kernel_module: the kernel's source for "
                                           r"float64 changed .*the importer's 1{20}"):
        rows_gemm.kernel_module("float64", "1" * 20)
