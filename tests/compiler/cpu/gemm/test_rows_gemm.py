"""compiler/cpu/gemm/rows_gemm.py: the register-tile product against numpy (whole panels, one-vector
tiles, every narrower column rest, rows past the tile's, a transposed a; both tiles on
every machine), which products it takes, and that sync mode never compiles it in a call."""
import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import loader as native
from tracejit.compiler.cpu.gemm import template_panels
from tracejit.compiler.cpu.gemm import rows_gemm

pytest.importorskip("numba", reason="the kernel is numba code")

_mods: dict = {}


def _kernel(dtype: str):
    """The kernel compiled with the tile `rows_gemm` picks now (see the `tile` fixture)."""
    key = (dtype, rows_gemm.tile_shape(dtype), rows_gemm.k_block(dtype), rows_gemm.rest_rows(dtype))
    if key not in _mods:
        ns: dict = {"CACHE": False}
        exec(compile(rows_gemm.source(dtype), f"<rows_gemm {dtype}>", "exec"), ns)
        _mods[key] = ns["kernel"]
    return _mods[key]


@pytest.fixture(params=[True, False], ids=["avx512-tile", "avx2-tile"])
def tile(request, monkeypatch):
    """Both register tiles on every machine (LLVM splits or joins the vectors for the CPU)."""
    monkeypatch.setattr(template_panels, "_has_avx512", lambda: request.param)
    return request.param


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n,trans", [(17, 40, 127, False), (9, 33, 100, True), (3, 7, 1, False),
                                         (8, 5, 48, True), (1, 64, 31, False), (13, 600, 127, False),
                                         (9, 513, 100, True), (5, 256, 31, False), (6, 257, 60, True), (12, 64, 100, True), (21, 300, 100, False),
                                         (9, 12, 1100, False)])
def test_kernel_equals_numpy(dtype, m, k, n, trans, tile):
    """n = 127 and 31: whole panels (if any), one-vector tiles and a rest of every narrower
    width; m = 17, 9, 3, 1: rows past the tile's run one-row tiles; a transposed view of a.
    k = 600, 513, 257: the AVX2 tile's K blocks (`k_block`: whole blocks, a last partial
    one, a last block of one row), 256: exactly one block. m = 12, 21 with n = 100: the AVX2
    rest tiles' 8 rows, and rows past them (4 and 5) one at a time. 12x1100: one block whose
    B is past ROWS_FIRST_BYTES (a thin depth's): the panel order, not rows first."""
    r = np.random.default_rng(0)
    a = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
    a = a.T if trans else a
    b = r.standard_normal((k, n)).astype(dtype)
    flat, ars, aks = rows_gemm._strides(a)
    c = np.full((m, n), np.nan, dtype)
    _kernel(dtype)(flat, ars, aks, m, k, b.reshape(-1), n, c.reshape(-1))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, **_tol(dtype, k))


def test_k_block_is_chosen_by_instruction_set(monkeypatch):
    """The AVX2 tile sums K in blocks of K_BLOCK_AVX2 (its B panel kept in L1) and runs its
    column rests 8 rows at a time; the AVX-512 tile sums all of K at once (0) and runs its
    rests on its own 8 rows, so its results are what they were before either.
    The host's instruction set is not asked: the query is replaced both ways."""
    for avx512, block, rest in ((True, 0, 8), (False, rows_gemm.K_BLOCK_AVX2, 8)):
        monkeypatch.setattr(template_panels, "_has_avx512", lambda v=avx512: v)
        for dtype in ("float32", "float64"):
            assert rows_gemm.k_block(dtype) == block
            assert rows_gemm.rest_rows(dtype) == rest   # AVX2: twice its tile's 4 rows
            gv, gmr, gnv = rows_gemm.tile_shape(dtype)
            assert gmr == (8 if avx512 else 4)
            assert f"GV, GMR, GNV, KC, RMR = {gv}, {gmr}, {gnv}, {block}, {rest}\n" in rows_gemm.source(dtype)
            rows_first = rows_gemm.ROWS_FIRST_BYTES // np.dtype(dtype).itemsize
            assert f"ROWS_FIRST = {rows_first}\n" in rows_gemm.source(dtype)
    assert rows_gemm.K_BLOCK_AVX2 == 256


def test_k_blocks_sum_in_order(monkeypatch):
    """With the AVX2 tile each K block is summed in registers and then added to C, in K
    order: the last block's three terms of 2^-24 each vanish added one by one to 2 (below half
    an ulp), but summed first (0.75 ulp) they round 2 up to 2 + 2^-22. A whole-K sum gives 2."""
    monkeypatch.setattr(template_panels, "_has_avx512", lambda: False)
    kb = rows_gemm.K_BLOCK_AVX2
    k, n = 2 * kb + 3, 24
    a = np.zeros((4, k), np.float32)
    a[:, 0] = 2.0
    a[:, 2 * kb:] = 2.0 ** -24
    b = np.ones((k, n), np.float32)
    c = np.full((4, n), np.nan, np.float32)
    flat, ars, aks = rows_gemm._strides(a)
    _kernel("float32")(flat, ars, aks, 4, k, b.reshape(-1), n, c.reshape(-1))
    np.testing.assert_array_equal(c, np.float32(2.0 + 2.0 ** -22))


def _recording_kernel(monkeypatch) -> list:
    """Stands in for the loaded kernel: each call's arguments are appended to the list."""
    calls: list = []

    class Loaded:
        def get(self):
            return lambda *args: calls.append(args)
    monkeypatch.setattr(rows_gemm, "_kernel", lambda *a, **k: Loaded())
    monkeypatch.setattr(rows_gemm, "_loaded", {})
    return calls


def test_product_takes_only_what_it_can_run(monkeypatch):
    """Other dtypes, a strided a, a transposed b, shapes below the bounds: None (numpy runs)."""
    calls = _recording_kernel(monkeypatch)
    n = rows_gemm.MIN_COLUMNS + 4
    m, k = 64, rows_gemm.MIN_MNK // (64 * n) + 2
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    assert rows_gemm.product(a, b) is not None and len(calls) == 1
    assert rows_gemm.product(np.asfortranarray(a), b) is not None and calls[-1][1:3] == (1, m)
    shallow = rows_gemm.MIN_DEPTH - 1                  # K too small, m*k*n past MIN_MNK
    deep = np.ones((rows_gemm.MIN_MNK // (shallow * n) + 1, shallow), np.float32)
    for a2, b2 in [(a.astype(np.int32), b.astype(np.int32)), (a, b.astype(np.float64)),
                   (a[:, ::2], b[::2]), (a, np.asfortranarray(b)), (deep, b[:shallow]),
                   (a, b[:, :rows_gemm.MIN_COLUMNS - 1]), (a[:8], b)]:
        assert rows_gemm.product(a2, b2) is None
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(rows_gemm.T_MIN_ROWS, 2048, 257), (rows_gemm.T_MAX_ROWS, 700, 131), (21, 1500, 200)])
def test_transposed_b_equals_numpy(dtype, m, k, n, tile, monkeypatch):
    """``x @ w.T`` (an F-contiguous b) runs as ``(w @ x.T).T``: numpy's values, a C-contiguous
    result as numpy's, and the same bits whether a is row-major or a transposed view."""
    monkeypatch.setattr(rows_gemm, "_loaded", {dtype: _kernel(dtype)})
    r = np.random.default_rng(1)
    x = r.standard_normal((m, k)).astype(dtype)
    w = r.standard_normal((n, k)).astype(dtype)
    got = rows_gemm.product(x, w.T)
    assert got is not None and got.shape == (m, n) and got.flags.c_contiguous
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), **_tol(dtype, k))
    assert np.array_equal(rows_gemm.product(np.asfortranarray(x), w.T), got)


def test_transposed_b_takes_only_few_rows(monkeypatch):
    """An F-contiguous b is taken from T_MIN_ROWS to T_MAX_ROWS rows of a (the kernel then
    runs w's rows against a.T's columns), not outside them, nor past the other bounds."""
    calls = _recording_kernel(monkeypatch)
    k, n = 2048, 512
    w = np.ones((n, k), np.float32)
    for m in (rows_gemm.T_MIN_ROWS, rows_gemm.T_MAX_ROWS):
        assert rows_gemm.product(np.ones((m, k), np.float32), w.T) is not None
        assert calls[-1][3:5] == (n, k) and calls[-1][6] == m      # w's rows, a's rows as columns
    for m in (rows_gemm.T_MIN_ROWS - 1, rows_gemm.T_MAX_ROWS + 1):
        assert rows_gemm.product(np.ones((m, k), np.float32), w.T) is None
    assert rows_gemm.product(np.ones((16, 32), np.float32), np.ones((n, 32), np.float32).T) is None  # K
    assert len(calls) == 2


def test_sync_mode_loads_only_from_disk(monkeypatch, tmp_path):
    """A kernel made with sync_compiles=False is not compiled in a sync-mode call (its source
    is not even made), and stays on numpy in this process; the default kernel compiles."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    made = []

    def make():
        made.append(1)
        return "this is not python"
    k = native.NativeKernel(make, "test_rows_no_compile", sync_compiles=False)
    assert made == []                     # the source is made when the kernel is loaded
    monkeypatch.setattr(native.NativeKernel, "_on_disk", lambda self: False)
    assert k.get() is None and k.failed
    k2 = native.NativeKernel(make, "test_rows_compile")
    assert k2.get() is None and k2.failed and made == [1]   # it tried (and this source fails)
