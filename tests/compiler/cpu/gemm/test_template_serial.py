"""compiler/cpu/gemm/template_panels.py's serial entry (the template's tiles on the calling thread)
against numpy (whole panels, one-vector tiles, every narrower column rest, rows past the
tile's, a transposed a, the AVX2 tile's K blocks; both tiles on every machine), and which
products compiler/cpu/gemm/router.py's `_serial_product` gives it; sync mode never compiles it
in a call."""
import numpy as np
import pytest

from tracejit.compiler.cpu.kernels import loader as native
from tracejit.compiler.cpu.gemm import router, template_panels

pytest.importorskip("numba", reason="the kernel is numba code")

_mods: dict = {}


def _kernel(dtype: str):
    """The entry compiled with the tile the module picks now (see the `tile` fixture)."""
    key = (dtype, template_panels.serial_config(dtype), template_panels.k_block(dtype))
    if key not in _mods:
        ns: dict = {"CACHE": False}
        exec(compile(template_panels.serial_source(dtype), f"<serial {dtype}>", "exec"), ns)
        _mods[key] = ns["kernel"]
    return _mods[key]


@pytest.fixture(params=[True, False], ids=["avx512-tile", "avx2-tile"])
def tile(request, monkeypatch):
    """Both register tiles on every machine (LLVM splits or joins the vectors for the CPU)."""
    monkeypatch.setattr(template_panels, "_has_avx512", lambda: request.param)
    return request.param


def _strides(a):
    """(flat a, ars, aks) of a row-major a or a transposed view of one."""
    m, k = a.shape
    return (a.reshape(-1), k, 1) if a.flags.c_contiguous else (a.T.reshape(-1), 1, m)


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
    B is 1100 columns wide (a thin depth's)."""
    r = np.random.default_rng(0)
    a = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
    a = a.T if trans else a
    b = r.standard_normal((k, n)).astype(dtype)
    flat, ars, aks = _strides(a)
    c = np.full((m, n), np.nan, dtype)
    _kernel(dtype)(flat, ars, aks, m, k, b.reshape(-1), n, c.reshape(-1))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, **_tol(dtype, k))


def test_k_block_is_chosen_by_instruction_set(monkeypatch):
    """The AVX2 tile (4 x 3) sums K in blocks of K_BLOCK_AVX2 (its B panel kept in L1); the
    AVX-512 tile (8 x 3) sums all of K at once (0). The host's instruction set is not asked:
    the query is replaced both ways."""
    for avx512, block in ((True, 0), (False, template_panels.K_BLOCK_AVX2)):
        monkeypatch.setattr(template_panels, "_has_avx512", lambda v=avx512: v)
        for dtype in ("float32", "float64"):
            assert template_panels.k_block(dtype) == block
            cfg = template_panels.serial_config(dtype)
            assert (cfg.mr, cfg.nv) == ((8, 3) if avx512 else (4, 3))
            v = template_panels.vector_width(dtype)
            source = template_panels.serial_source(dtype)
            assert f"MR, NV, V, KS, PACK, DOT = {cfg.mr}, 3, {v}, 1, False, False\n" in source
            assert (f"for kb in range(0, kd, {block}):" in source) == (block > 0)
    assert template_panels.K_BLOCK_AVX2 == 256


def test_k_blocks_sum_in_order(monkeypatch):
    """With the AVX2 tile each K block is summed in registers and then added to C, in K
    order: the last block's three terms of 2^-24 each vanish added one by one to 2 (below half
    an ulp), but summed first (0.75 ulp) they round 2 up to 2 + 2^-22. A whole-K sum gives 2."""
    monkeypatch.setattr(template_panels, "_has_avx512", lambda: False)
    kb = template_panels.K_BLOCK_AVX2
    k, n = 2 * kb + 3, 24
    a = np.zeros((4, k), np.float32)
    a[:, 0] = 2.0
    a[:, 2 * kb:] = 2.0 ** -24
    b = np.ones((k, n), np.float32)
    c = np.full((4, n), np.nan, np.float32)
    flat, ars, aks = _strides(a)
    _kernel("float32")(flat, ars, aks, 4, k, b.reshape(-1), n, c.reshape(-1))
    np.testing.assert_array_equal(c, np.float32(2.0 + 2.0 ** -22))


def _recording_kernel(monkeypatch) -> list:
    """Stands in for the loaded kernel: each call's arguments are appended to the list."""
    calls: list = []

    class Loaded:
        def get(self):
            return lambda *args: calls.append(args)
    monkeypatch.setattr(template_panels, "serial_kernel", lambda *a, **k: Loaded())
    monkeypatch.setattr(router, "_serial_loaded", {})
    return calls


def test_product_takes_only_what_it_can_run(monkeypatch):
    """Other dtypes, a strided a, a transposed b, shapes below the bounds: None (numpy runs)."""
    calls = _recording_kernel(monkeypatch)
    n = router.SERIAL_MIN_COLUMNS + 4
    m, k = 64, router.SERIAL_MIN_MNK // (64 * n) + 2
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    assert router._serial_product(a, b) is not None and len(calls) == 1
    assert router._serial_product(np.asfortranarray(a), b) is not None and calls[-1][1:3] == (1, m)
    shallow = router.SERIAL_MIN_DEPTH - 1                  # K too small, m*k*n past MIN_MNK
    deep = np.ones((router.SERIAL_MIN_MNK // (shallow * n) + 1, shallow), np.float32)
    for a2, b2 in [(a.astype(np.int32), b.astype(np.int32)), (a, b.astype(np.float64)),
                   (a[:, ::2], b[::2]), (a, np.asfortranarray(b)), (deep, b[:shallow]),
                   (a, b[:, :router.SERIAL_MIN_COLUMNS - 1]), (a[:8], b)]:
        assert router._serial_product(a2, b2) is None
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(router.SERIAL_T_MIN_ROWS, 2048, 257), (router.SERIAL_T_MAX_ROWS, 700, 131), (21, 1500, 200)])
def test_transposed_b_equals_numpy(dtype, m, k, n, tile, monkeypatch):
    """``x @ w.T`` (an F-contiguous b) runs as ``(w @ x.T).T``: numpy's values, a C-contiguous
    result as numpy's, and the same bits whether a is row-major or a transposed view."""
    monkeypatch.setattr(router, "_serial_loaded", {dtype: _kernel(dtype)})
    r = np.random.default_rng(1)
    x = r.standard_normal((m, k)).astype(dtype)
    w = r.standard_normal((n, k)).astype(dtype)
    got = router._serial_product(x, w.T)
    assert got is not None and got.shape == (m, n) and got.flags.c_contiguous
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), **_tol(dtype, k))
    assert np.array_equal(router._serial_product(np.asfortranarray(x), w.T), got)


def test_transposed_b_takes_only_few_rows(monkeypatch):
    """An F-contiguous b is taken from T_MIN_ROWS to T_MAX_ROWS rows of a (the kernel then
    runs w's rows against a.T's columns), not outside them, nor past the other bounds."""
    calls = _recording_kernel(monkeypatch)
    k, n = 2048, 512
    w = np.ones((n, k), np.float32)
    for m in (router.SERIAL_T_MIN_ROWS, router.SERIAL_T_MAX_ROWS):
        assert router._serial_product(np.ones((m, k), np.float32), w.T) is not None
        assert calls[-1][3:5] == (n, k) and calls[-1][6] == m      # w's rows, a's rows as columns
    for m in (router.SERIAL_T_MIN_ROWS - 1, router.SERIAL_T_MAX_ROWS + 1):
        assert router._serial_product(np.ones((m, k), np.float32), w.T) is None
    assert router._serial_product(np.ones((16, 32), np.float32), np.ones((n, 32), np.float32).T) is None  # K
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
