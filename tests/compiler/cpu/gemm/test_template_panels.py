"""compiler/cpu/gemm/template_panels.py against numpy: the template's products on a packed left
operand (`panel_product`: a range of panels, a part of the packed columns, beta 0 and 1) and
on a row-major one read in place (`row_product`), over odd sizes (1xK, Kx1, column rests of
every width, rows past the tile's), float32 and float64; the packs (`panel_pack`,
`panel_pack_t`) and compiler/cpu/kernels/register_transpose.py's `panel_transpose` called by
address as the recurrent loops call them; a module of another digest refused by name."""
import numpy as np
import pytest

from tracejit.compiler import diskcache
from tracejit.compiler.cpu.gemm import template_panels as tp
from tracejit.compiler.cpu.kernels import register_transpose as rt

pytest.importorskip("numba", reason="the panels are numba code")

_SHAPES = [(1, 1, 1), (1, 37, 1), (37, 1, 1), (1, 1, 45), (13, 7, 37), (40, 300, 33), (8, 5, 3), (64, 64, 64),
           (97, 31, 100), (300, 2, 129)]


def _panels(dtype):
    return tp.panel_module(dtype, tp.source_digest(tp.panel_source(dtype)))


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


def _packed(a, mr):
    """The panels of a (m, k) in numpy: panel p's k-th MR values are rows p*MR.. at column k."""
    m, k = a.shape
    rows = -(-m // mr) * mr
    full = np.zeros((rows, k), a.dtype)
    full[:m] = a
    return full.reshape(rows // mr, mr, k).transpose(0, 2, 1).reshape(-1).copy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", _SHAPES)
def test_panel_product_equals_numpy(dtype, m, k, n):
    """c = a @ b and c += a @ b on the packed a, all panels; the padding rows are written
    (zero sums), the rows past them untouched."""
    mod = _panels(dtype)
    mr = tp.panel_config(dtype).mr
    r = np.random.default_rng(m * 1000 + k * 10 + n)
    a = r.standard_normal((m, k)).astype(dtype)
    b = r.standard_normal((k, n)).astype(dtype)
    b.flags.writeable = False
    rows = tp.panel_rows(m, dtype)
    assert rows % mr == 0 and m <= rows < m + mr and tp.panel_size(m, k, dtype) == rows * k
    want = a.astype(np.float64) @ b
    for beta in (False, True):
        c = np.full((rows + 2, n), 0.5, dtype)
        mod.panel_product(_packed(a, mr), 0, rows // mr, k, 0, k, b, c, beta)
        np.testing.assert_allclose(c[:m], want + (0.5 if beta else 0), **_tol(dtype, k))
        np.testing.assert_array_equal(c[m:rows], np.full((rows - m, n), 0.5 if beta else 0, dtype))
        np.testing.assert_array_equal(c[rows:], 0.5)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_panel_product_of_a_part_of_panels_and_columns(dtype):
    """Panels p0..p1-1 of [w1 | w2] times b2 alone (columns k0..k1 of the packed operand, as the
    LSTM loop multiplies W_hh h_prev on the panels of [W_ih | W_hh]) touch only their rows."""
    mod = _panels(dtype)
    mr = tp.panel_config(dtype).mr
    r = np.random.default_rng(5)
    m, k1, k2, n = 5 * mr + 3, 11, 17, 35
    w = r.standard_normal((m, k1 + k2)).astype(dtype)
    b2 = r.standard_normal((k2, n)).astype(dtype)
    c = np.full((tp.panel_rows(m, dtype), n), 2.0, dtype)
    mod.panel_product(_packed(w, mr), 1, 3, k1 + k2, k1, k1 + k2, b2, c, True)
    want = np.full(c.shape, 2.0)
    want[mr:3 * mr] += w[mr:3 * mr, k1:].astype(np.float64) @ b2
    np.testing.assert_allclose(c, want, **_tol(dtype, k2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", _SHAPES)
def test_row_product_equals_numpy(dtype, m, k, n):
    """c[i0:i1] (+)= a[i0:i1] @ b, a row-major in place: whole tiles, rows past them one at a
    time, every column rest; the rows outside untouched."""
    mod = _panels(dtype)
    r = np.random.default_rng(m + 7 * k + 11 * n)
    a = r.standard_normal((m, k)).astype(dtype)
    b = r.standard_normal((k, n)).astype(dtype)
    for i0, i1 in ((0, m), (m // 3, m)):
        for beta in (False, True):
            c = np.full((m, n), -1.0, dtype)
            mod.row_product(a, i0, i1, b, c, beta)
            want = np.full((m, n), -1.0)
            want[i0:i1] = a[i0:i1].astype(np.float64) @ b + (-1.0 if beta else 0)
            np.testing.assert_allclose(c, want, **_tol(dtype, k))


_BY_ADDRESS = {}


def _drivers(dtype):
    """njit callers of the packs and the transpose through their addresses (as the loops call them)."""
    if dtype not in _BY_ADDRESS:
        from numba import njit
        from tracejit.compiler.cpu.runtime.voidptr import call_at, native_address
        mod = _panels(dtype)
        tr = rt.transpose_module(dtype, tp.source_digest(rt.transpose_source(dtype))).panel_transpose
        pack, pack_t = mod.panel_pack, mod.panel_pack_t

        @njit
        def packs(fns, w, wp, trans, p0, p1, k0, kd):
            if trans:
                call_at(fns[1], pack_t, (w, wp, p0, p1, k0, kd))
            else:
                call_at(fns[0], pack, (w, wp, p0, p1, k0, kd))

        @njit
        def transpose(fns, src, i0, i1, j0, j1, dst, add):
            call_at(fns[2], tr, (src, i0, i1, j0, j1, dst, add))
        fns = np.array([native_address(pack), native_address(pack_t), native_address(tr)], np.int64)
        _BY_ADDRESS[dtype] = fns, packs, transpose
    return _BY_ADDRESS[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("trans", [False, True])
def test_packs_by_address_write_the_panels(dtype, trans):
    """`panel_pack` (w's rows) and `panel_pack_t` (w^T's, read along w's rows) write panels
    p0..p1-1 as columns k0.. of a packed matrix kd wide: the numpy panels there, the padding
    rows zero, nothing else touched."""
    fns, packs, _ = _drivers(dtype)
    mr = tp.panel_config(dtype).mr
    r = np.random.default_rng(7)
    for m, k in ((3 * mr + 5, 7), (2 * mr, 1), (mr - 3, 4)):
        w = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
        w.flags.writeable = False
        rows_w = w.T if trans else w
        kd = k + 3
        panels = -(-m // mr)
        for p0, p1, k0 in ((0, panels, 0), (1 if panels > 1 else 0, panels, 3)):
            got = np.full(panels * mr * kd, np.nan, dtype)
            packs(fns, w, got, trans, p0, p1, k0, kd)
            wide = np.full((panels * mr, kd), np.nan)
            wide[:, k0:k0 + k] = 0
            wide[:m, k0:k0 + k] = rows_w
            want = _packed(wide, mr).reshape(panels, kd, mr)
            got = got.reshape(panels, kd, mr)
            np.testing.assert_array_equal(got[p0:p1, k0:k0 + k], want[p0:p1, k0:k0 + k])
            assert np.isnan(got[:p0]).all() and np.isnan(got[p0:p1, :k0]).all()
            assert np.isnan(got[p0:p1, k0 + k:]).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transpose_by_address_writes_its_rectangle(dtype):
    """dst[j, i] (+)= src[i, j] over a rectangle: whole register blocks and both edges, a
    read-only source, set and add, nothing outside the rectangle touched."""
    fns, _, transpose = _drivers(dtype)
    v = tp.vector_width(dtype)
    r = np.random.default_rng(11)
    for rows, cols, i0, i1, j0, j1 in ((4 * v + 3, 2 * v + 5, 0, 4 * v + 3, 0, 2 * v + 5),
                                       (4 * v, 3 * v, v, 3 * v, 0, 2 * v + 1), (7, 5, 1, 6, 2, 5)):
        src = r.standard_normal((rows, cols)).astype(dtype)
        src.flags.writeable = False
        for add in (False, True):
            base = r.standard_normal((cols, rows)).astype(dtype)
            got = base.copy()
            transpose(fns, src, i0, i1, j0, j1, got, add)
            want = base.copy()
            want[j0:j1, i0:i1] = src[i0:i1, j0:j1].T + (base[j0:j1, i0:i1] if add else 0)
            np.testing.assert_array_equal(got, want)


def test_the_panel_configuration_is_a_template_configuration():
    """The panels render the template's tiles (one `_make_tile`) for a template `Config`:
    two vectors of columns, as many rows as the register file holds beside them."""
    from tracejit.compiler.cpu.gemm import template
    for dtype in ("float32", "float64"):
        cfg = tp.panel_config(dtype)
        assert isinstance(cfg, template.Config) and cfg.nv == 2 and cfg.mr in (4, 8)
        src = tp.panel_source(dtype)
        assert "def _make_tile(mr, widths, keep=False):" in src
        assert f"MR, NV, V, DOT = {cfg.mr}, 2, {tp.vector_width(dtype)}, False" in src


def test_a_module_of_another_digest_is_refused_by_name(monkeypatch):
    """An importer made against another source would call the functions by address with that
    one's arguments: the load is refused before any compile or disk read."""
    from tracejit.compiler import diskcache
    monkeypatch.setattr(diskcache, "load_module", lambda *a, **k: pytest.fail("loaded"))
    good = tp.source_digest(tp.panel_source("float32"))
    with pytest.raises(RuntimeError, match=r"template_panels.panel_module: the panels' source for float32 "
                                           r"changed \(digest " + good + r", the importer's 0{20}\)"):
        tp.panel_module("float32", "0" * 20)
    with pytest.raises(RuntimeError, match=r"register_transpose.transpose_module: the transposes' source "
                                           r"for float64 changed .*the importer's 1{20}"):
        rt.transpose_module("float64", "1" * 20)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_first_and_panel_order_sum_the_same(dtype):
    """Where all of B fits in L1 a row tile runs across all column panels first, else each
    column panel down all row tiles: the same sums, bit for bit (the module compiled with
    the rows-first bound at 0 runs the panel order on the same operands)."""
    src = tp.panel_source(dtype)
    bound = f"ROWS_FIRST = {tp.ROWS_FIRST_BYTES // np.dtype(dtype).itemsize}\n"
    assert bound in src
    # through the disk cache like the template's own module: compiled once per source
    panel_order = diskcache.load_module(src.replace(bound, "ROWS_FIRST = 0\n"), name_hint="panel_order")
    r = np.random.default_rng(2)
    for m, k, n in ((37, 32, 61), (64, 16, 256)):
        assert k * n * np.dtype(dtype).itemsize <= tp.ROWS_FIRST_BYTES
        a, b = r.standard_normal((m, k)).astype(dtype), r.standard_normal((k, n)).astype(dtype)
        rows_first, panels = np.full((m, n), 1.5, dtype), np.full((m, n), 1.5, dtype)
        _panels(dtype).row_product(a, 0, m, b, rows_first, True)
        panel_order.row_product(a, 0, m, b, panels, True)
        np.testing.assert_array_equal(rows_first.view(np.uint8), panels.view(np.uint8))
        np.testing.assert_allclose(rows_first, a.astype(np.float64) @ b + 1.5, **_tol(dtype, k))
