"""ops/packed_gemm.py's numba helpers against numpy: the per-step GEMM on packed weights
(whole register tiles of both widths, the scalar column rest, row padding, beta 0 and 1;
weights packed from their rows or their transpose's)
and the register-block transpose (whole blocks and both edges, written and added)."""
import numpy as np
import pytest

from tracejit.ops import packed_gemm

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
