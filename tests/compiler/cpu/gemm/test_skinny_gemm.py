"""compiler/cpu/gemm/skinny_gemm.py: the dot kernel against numpy (4 x 4 blocks, column and row rests,
a bias, NaN and inf) and its halves, which products `product` takes and where it sends
them, and that router.matmul and epilogue.matmul_bias hand it the head's products."""
import ctypes

import numpy as np
import pytest
from test_halves import serial_launch  # noqa: F401 (a fixture)

from tracejit.compiler.cpu.gemm import router
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.compiler.cpu.gemm import epilogue
from tracejit.compiler.cpu.gemm import halves
from tracejit.compiler.cpu.gemm import skinny_gemm

pytest.importorskip("numba", reason="the kernels are numba code")
pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")

_mods: dict = {}


def _exec(source: str, label: str):
    if label not in _mods:
        ns: dict = {"CACHE": False}
        exec(compile(source, f"<{label}>", "exec"), ns)
        _mods[label] = ns["kernel"]
    return _mods[label]


def _dot(dtype: str):
    return _exec(skinny_gemm.source(dtype), "skinny " + dtype)


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(256, 1024, 10), (17, 33, 7), (4, 1, 4), (5, 64, 16), (1, 3, 1), (3, 100, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_dot_kernel_equals_numpy(dtype, m, k, n, bias):
    """x @ w.T (+ b): whole 4 x 4 blocks, a rest of w's rows, a rest of x's rows."""
    r = np.random.default_rng(0)
    x = r.standard_normal((m, k)).astype(dtype)
    w = r.standard_normal((n, k)).astype(dtype)
    b = r.standard_normal(n).astype(dtype)
    out = np.full((m, n), np.nan, dtype)
    _dot(dtype)(x, w, b, bias, out)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    np.testing.assert_allclose(out, want, **_tol(dtype, k))


def test_dot_kernel_keeps_nan_and_inf():
    """Only reassociation is allowed: a NaN or an inf in x reaches its row as in BLAS."""
    x = np.ones((8, 40), np.float32)
    w = np.ones((6, 40), np.float32)
    x[1, 7] = np.nan
    x[6, 3] = np.inf
    out = np.empty((8, 6), np.float32)
    _dot("float32")(x, w, w[0], False, out)
    np.testing.assert_array_equal(out, x @ w.T)
    assert np.isnan(out[1]).all() and np.isposinf(out[6]).all() and (out[0] == 40).all()


@pytest.fixture
def loaded(monkeypatch) -> list:
    """`product` with the dot kernel compiled here (sync mode would only load it from the
    disk cache) and without its halves, `halves.thin` numpy's product; the list records
    which ran."""
    ran: list = []

    def dot(t):
        fn = _dot(t)
        return (lambda *args: (ran.append("dot"), fn(*args))), None   # (no halves)
    monkeypatch.setattr(skinny_gemm, "_dot", dot)
    monkeypatch.setattr(halves, "thin", lambda a, b: (ran.append("halves"), a @ b)[1])
    return ran


def _head(dtype=np.float32):
    r = np.random.default_rng(1)
    h = r.standard_normal((256, 1024)).astype(dtype)
    w = r.standard_normal((10, 1024)).astype(dtype)
    g = r.standard_normal((256, 10)).astype(dtype)
    return h, w, g


def test_product_runs_the_heads_three_products(loaded):
    """Logits by the dot kernel (a bias too), the input gradient (K = 10) and the weight
    gradient (M = 10, a transposed view) by the register-tile kernel's halves
    (tests/compiler/cpu/gemm/test_halves.py runs those)."""
    h, w, g = _head()
    b = np.arange(10, dtype=np.float32)
    for a, bb, bias, kernel in ((h, w.T, None, "dot"), (h, w.T, b, "dot"), (g, w, None, "halves"),
                                (g.T, h, None, "halves")):
        out = skinny_gemm.product(a, bb, bias)
        assert loaded.pop() == kernel and out.shape == (a.shape[0], bb.shape[1]) and out.flags.c_contiguous
        want = a.astype(np.float64) @ bb + (0 if bias is None else bias)
        np.testing.assert_allclose(out, want, **_tol("float32", a.shape[1]))


def test_product_leaves_what_it_cannot_run(loaded, monkeypatch):
    h, w, g = _head()
    assert skinny_gemm.product(h[:64], w.T) is None                 # below MIN_MNK
    assert skinny_gemm.product(np.ones((1024, 1024), np.float32), np.ones((10, 1024), np.float32).T) is None  # MAX_DOT_MNK
    assert skinny_gemm.product(np.ones((2048, 10), np.float32), np.ones((10, 256), np.float32)) is None  # MAX_MNK
    assert skinny_gemm.product(h, np.ascontiguousarray(w.T)) is None  # few columns of a C-contiguous b
    assert skinny_gemm.product(h[:, ::2], w[:, ::2].T) is None      # a strided x
    assert skinny_gemm.product(g, w, np.ones(1024, np.float32)) is None  # a bias: the dot kernel's only
    assert skinny_gemm.product(h, w.T.astype(np.float64)) is None   # two dtypes
    assert skinny_gemm.product(h.astype(np.int32), w.T.astype(np.int32)) is None
    assert skinny_gemm.product(h, np.ones((1024, 100), np.float32)) is None  # nothing thin
    monkeypatch.setenv("TRACEJIT_SKINNY_HALVES", "0")
    assert skinny_gemm.product(g, w) is None                        # thin: the halves or BLAS
    monkeypatch.setenv("TRACEJIT_SKINNY_GEMM", "0")
    assert skinny_gemm.product(h, w.T) is None
    assert not loaded


def test_dot_kernel_takes_the_transformer_heads_logits(loaded):
    """Past MAX_MNK (the halves' range) up to MAX_DOT_MNK the dot kernel still takes a
    head's logits (the Transformer step's 2048x256x10, bias in it) through router.matmul and
    epilogue.matmul_bias; the head's small-depth input gradient there is not skinny's."""
    r = np.random.default_rng(2)
    h = r.standard_normal((2048, 256)).astype(np.float32)
    w = r.standard_normal((10, 256)).astype(np.float32)
    b = r.standard_normal(10).astype(np.float32)
    g = r.standard_normal((2048, 10)).astype(np.float32)
    assert skinny_gemm.MAX_MNK <= 2048 * 256 * 10 < skinny_gemm.MAX_DOT_MNK
    want = h.astype(np.float64) @ w.T.astype(np.float64) + b
    np.testing.assert_allclose(epilogue.matmul_bias(np, h[None], w.T, b.reshape(1, 10))[0], want,
                               **_tol("float32", 256))
    np.testing.assert_allclose(router.matmul(h, w.T), want - b, **_tol("float32", 256))
    assert loaded == ["dot", "dot"]
    np.testing.assert_allclose(router.matmul(g, w), g.astype(np.float64) @ w, **_tol("float32", 10))
    assert loaded == ["dot", "dot"]           # (neither the dot kernel nor skinny's halves)


def test_matmul_and_matmul_bias_hand_it_the_head(loaded):
    """router.matmul (eager matmul and the plans' MATMUL) and the plans' bias epilogue."""
    h, w, g = _head()
    b = np.linspace(-1, 1, 10).astype(np.float32)
    np.testing.assert_allclose(router.matmul(h, w.T), h @ w.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(router.matmul(g.T, h), g.T @ h, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(epilogue.matmul_bias(np, h[None], w.T, b.reshape(1, 10)),
                               (h @ w.T + b)[None], rtol=1e-4, atol=1e-3)
    assert loaded == ["dot", "halves", "dot"]


def test_load_gemm_kernels_loads_what_sync_mode_gave_up_on(monkeypatch):
    """Sync mode, loaders that gave up in a call (the disk cache did not hold the modules
    then): router.load_gemm_kernels loads the template's serial entry, the halves and the dot
    kernel, and the head's logits then run on the dot kernel (numpy's result)."""
    from tracejit.compiler.cpu.kernels import loader as native
    from tracejit.compiler.cpu.gemm import template, template_panels
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setattr(native, "_kernels", {})
    # (one template configuration: the others load the same way, each a compile of its own)
    monkeypatch.setattr(template, "CONFIGS", template.CONFIGS[:1])
    for module, name in ((skinny_gemm, "_loaded"), (router, "_serial_loaded"), (halves, "_pairs")):
        monkeypatch.setattr(module, name, {})
    sources = {("gemm_serial", "float32"): template_panels.serial_source, ("rows_gemm_halves", "float32"): halves.source,
               ("skinny_gemm", "float32"): skinny_gemm.source}
    keys = list(sources)
    for key, src in sources.items():   # as a call in sync mode leaves a module the cache did not hold
        native.kernel(key, lambda src=src: src("float32"), sync_compiles=False).failed = True
    assert skinny_gemm._dot("float32") is None
    assert router.load_gemm_kernels()
    assert all(native._kernels[key].fn is not None for key in keys)
    dot = skinny_gemm._dot("float32")
    assert dot is not None and dot[1] is not None   # the kernel and its halves
    h, w, _ = _head()
    monkeypatch.setenv("TRACEJIT_SKINNY_HALVES", "0")
    np.testing.assert_allclose(skinny_gemm.product(h, w.T), h @ w.T, rtol=1e-4, atol=1e-3)


def test_thread_count_a_profiler_records(monkeypatch):
    """router.gemm_thread_count: BLAS's count until the kernel is loaded, then one on
    one core, two where the halves run."""
    router._skinny()
    monkeypatch.setattr(skinny_gemm, "_loaded", {})
    monkeypatch.setattr(halves, "two_cores", lambda: True)
    from tracejit.threads import blas_threads
    assert router.gemm_thread_count(256, 1024, 10) == (1 if coreshare.one_thread_now(256, 1024, 10) else blas_threads())
    monkeypatch.setattr(skinny_gemm, "_loaded", {"float32": None})
    assert router.gemm_thread_count(256, 1024, 10) == 2
    monkeypatch.setenv("TRACEJIT_SKINNY_HALVES", "0")
    assert router.gemm_thread_count(256, 10, 1024) == 1


@pytest.fixture
def serial(serial_launch, monkeypatch) -> list:
    """test_halves.py's `serial_launch` (the halves one after the other on this thread, what
    each core would compute) with the dot kernel and its halves loaded from the session's
    disk cache, two cores granted. The list records each launch's entry address."""
    from tracejit.compiler import diskcache
    loaded = {}
    for t in ("float32", "float64"):
        mod = diskcache.load_module(skinny_gemm.source(t), name_hint="native_skinny_gemm_" + t)
        loaded[t] = (mod.kernel, skinny_gemm._Pair(mod.kernel.py_func.__globals__))
        # the launch calls gotoblas_pthread by address from numba (`dot_launch`): the
        # fixture's runner instead, which runs the records in turn and records the entry
        loaded[t][1].pthread = ctypes.cast(serial_launch.runner, ctypes.c_void_p).value
    monkeypatch.setattr(skinny_gemm, "_loaded", loaded)
    monkeypatch.setattr(halves, "two_cores", lambda: True)
    # the router's halves, not a GEMM choice another test process stored in the shared cache
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")
    return serial_launch


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(256, 1024, 10), (101, 4000, 3), (9, 8000, 16)])
def test_dot_halves_are_the_one_thread_kernel_bitwise(serial, monkeypatch, dtype, m, k, n):
    """The logits in two row halves, the bias added in each: bitwise the one-thread
    kernel's rows."""
    kernel, pair = skinny_gemm._loaded[dtype]
    r = np.random.default_rng(2)
    x = r.standard_normal((m, k)).astype(dtype)
    w = r.standard_normal((n, k)).astype(dtype)
    b = r.standard_normal(n).astype(dtype)
    out = skinny_gemm.product(x, w.T, b)
    assert serial == [pair.entry_address] and out.shape == (m, n)
    one = np.empty((m, n), dtype)
    kernel(x, w, b, True, one)
    np.testing.assert_array_equal(out, one)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T + b, **_tol(dtype, k))
    monkeypatch.setenv("TRACEJIT_SKINNY_HALVES", "0")
    np.testing.assert_array_equal(skinny_gemm.product(x, w.T, b), one)
    assert len(serial) == 1


@pytest.mark.parametrize("dtype,item", [("float32", 4), ("float64", 8)])
@pytest.mark.parametrize("bias", [False, True])
def test_dot_records_hold_each_halfs_rows_and_addresses(serial, dtype, item, bias):
    """`dot_records` (one intrinsic a record, voidptr.put_row) writes record q's slots 0-7:
    x's address at its first row and its rows (the first half a multiple of 4), K, w's
    address, n, the bias's address, has_bias, out's address at that row; slot 15 stays the
    kernel's address."""
    m, k, n = 37, 6000, 5     # (m k n in the dot kernel's range)
    kernel, pair = skinny_gemm._loaded[dtype]
    r = np.random.default_rng(3)
    x = r.standard_normal((m, k)).astype(dtype)
    w = r.standard_normal((n, k)).astype(dtype)
    b = r.standard_normal(n).astype(dtype)
    kernel_at = pair.recs[0, 15]
    xd, wd = x.ctypes.data, w.ctypes.data
    out = skinny_gemm.product(x, w.T, b if bias else None)
    assert serial == [pair.entry_address]
    h = 20    # (37 // 2 + 3) // 4 * 4
    bd = pair.recs[0, 5]
    if bias:
        assert bd == b.ctypes.data
    od = pair.recs[0, 7]
    assert pair.recs[0, :8].tolist() == [xd, h, k, wd, n, bd, int(bias), od]
    assert pair.recs[1, :8].tolist() == [xd + h * k * item, m - h, k, wd, n, bd, int(bias), od + h * n * item]
    assert pair.recs[0, 15] == pair.recs[1, 15] == kernel_at != 0
    assert od == out.ctypes.data
    one = np.empty((m, n), dtype)
    kernel(x, w, b if bias else np.zeros(n, dtype), bias, one)
    np.testing.assert_array_equal(out, one)


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_a_compiled_head_agrees_with_eager_and_the_interpreter(serial, mode):
    """A classifier head's forward and gradients (logits by the dot kernel's halves with the
    bias, the input and weight gradients by the tile kernel's halves) against eager and the
    IR interpreter."""
    import tracejit as tj
    from tracejit.testing import assert_compiled_matches

    def head(x, w, b):
        return tj.nn.functional.linear(tj.relu(x), w, b)
    r = np.random.default_rng(4)
    x = tj.tensor(r.standard_normal((256, 1024)).astype(np.float32), requires_grad=True)
    w = tj.tensor(r.standard_normal((10, 1024)).astype(np.float32) * 0.03, requires_grad=True)
    b = tj.tensor(r.standard_normal(10).astype(np.float32), requires_grad=True)
    assert_compiled_matches(head, x, w, b, mode=mode, rtol=1e-4, atol=1e-4)
    assert len(set(serial)) == 2     # both kinds of halves ran
