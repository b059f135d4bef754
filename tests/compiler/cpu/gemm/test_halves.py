"""compiler/cpu/gemm/halves.py, elementwise_halves.py: products and arithmetic in cfunc halves.
The halves run one after the other on this thread here (`serial_launch`: what each thread
would compute, whatever the machine's cores), and once at once on OpenBLAS's worker where
numpy's BLAS has one. Depth halves (few rows) round differently from one product: compared
with a float64 product at the tolerance the serial entry's tests use; row halves and elementwise
ops are bitwise."""
import ctypes

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.cpu.gemm import elementwise_halves, halves, router
from tracejit.compiler.cpu.runtime import coreshare, sharepool

pytest.importorskip("numba", reason="the halves are numba cfuncs")
pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")

_pairs: dict = {}


def _loaded(dtype: str) -> dict:
    if dtype not in _pairs:
        from tracejit.compiler import diskcache
        mod = diskcache.load_module(halves.source(dtype), name_hint="native_rows_gemm_halves_" + dtype)
        # (the pair, the serial entry the halves call, the module's entry as native.py loads it)
        _pairs[dtype] = (halves._Pair(vars(mod)), mod.gemm_kernel, mod.kernel)
    return _pairs[dtype]


@pytest.fixture
def serial_launch(monkeypatch) -> list:
    """`_pair` gives the loaded entries whatever the cores; a launch runs record 0, then
    record 1, on this thread. The list counts launches."""
    launches = _Launches()
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)   # (`binary` asks it)   # (router.matmul asks it)
    monkeypatch.setattr(halves, "WARM_S", 1e9)
    monkeypatch.setattr(halves, "_warm_until", 1e18)
    monkeypatch.setattr(halves, "_pair", lambda dt: _loaded(np.dtype(dt).name)[0])

    # every launch calls gotoblas_pthread by address from numba (`gemm_launch`, `ew_launch`,
    # ...): each pair's `pthread` is this runner instead, which runs the records in turn
    def pthread(n, entry, args, stride):
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(entry)
        for q in range(n):
            fn(args + q * stride)
        launches.append(entry)
        return 0
    runner = _PTHREAD(pthread)
    pairs = {t: _loaded(t)[0] for t in ("float32", "float64")}
    for p in pairs.values():
        monkeypatch.setattr(p, "pthread", ctypes.cast(runner, ctypes.c_void_p).value)
    monkeypatch.setattr(halves, "_pairs", pairs)      # (`binary` reads the loaded pairs)
    launches.runner = runner        # (kept alive as long as the list)
    return launches


class _Launches(list):
    pass


_PTHREAD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("entry,m,k,n,trans", [
    ("product", 64, 1000, 100, False), ("product", 37, 1001, 131, False), ("product", 64, 999, 100, True),
    ("thin", 256, 10, 1024, False), ("thin", 37, 5, 131, True), ("thin", 10, 256, 1024, True),
    ("thin", 9, 77, 100, False)])
def test_halves_equal_the_product(serial_launch, dtype, entry, m, k, n, trans):
    """`product`'s few rows, split by the depth (odd depths too), and `thin`'s products of
    compiler/cpu/gemm/skinny_gemm.py (a small depth by rows, few rows by depth): against float64."""
    r = np.random.default_rng(0)
    a = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
    a = a.T if trans else a
    b = r.standard_normal((k, n)).astype(dtype)
    out = getattr(halves, entry)(a, b)
    assert serial_launch and out.shape == (m, n) and out.dtype == dtype and out.flags.c_contiguous
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, **_tol(dtype, k))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n,trans", [(1000, 64, 100, True), (203, 128, 197, False), (1000, 64, 100, False)])
def test_row_halves_are_the_one_thread_kernel_bitwise(serial_launch, dtype, m, k, n, trans):
    """Many rows (the weight gradient x.T @ g): split by rows, each element as the kernel on
    one thread computes it."""
    r = np.random.default_rng(1)
    a = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
    a = a.T if trans else a
    b = r.standard_normal((k, n)).astype(dtype)
    out = halves.product(a, b)
    assert serial_launch
    flat = a.T.reshape(-1) if trans else a.reshape(-1)
    ars, aks = (1, m) if trans else (k, 1)
    one = np.empty((m, n), dtype)
    _loaded(dtype)[1](flat, ars, aks, m, k, b.reshape(-1), n, one.reshape(-1))
    np.testing.assert_array_equal(out, one)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, **_tol(dtype, k))


def test_products_it_leaves(serial_launch):
    r = np.random.default_rng(2)
    a = r.standard_normal((64, 1000)).astype(np.float32)
    b = r.standard_normal((1000, 100)).astype(np.float32)
    assert halves.product(a[:, :100], b[:100]) is None            # below MIN_MNK
    assert halves.product(a, b[:, :64].copy()) is None             # too few columns
    assert halves.product(a, np.asfortranarray(b)) is None         # b not C-contiguous
    assert halves.product(a[:, ::2], b[::2]) is None               # a neither C nor F
    assert halves.product(a, b.astype(np.float64)) is None         # two dtypes
    assert halves.product(a.astype(np.int64), b.astype(np.int64)) is None
    assert halves.thin(a[:10].T, np.asfortranarray(b[:10])) is None  # thin: b not C-contiguous
    assert halves.thin(a[:10].T, b[:10].astype(np.float16)) is None
    assert not serial_launch


_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(_UFUNCS))
def test_elementwise_halves_are_numpy_bitwise(serial_launch, dtype, name):
    """Arrays, a scalar on either side (taken as the dtype, as numpy takes a Python float),
    into a new array or over either array operand; an odd size."""
    r = np.random.default_rng(3)
    x = r.standard_normal((317, 211)).astype(dtype)
    y = r.standard_normal((317, 211)).astype(dtype) + 3
    f, dt = _UFUNCS[name], np.dtype(dtype)
    np.testing.assert_array_equal(elementwise_halves.binary(name, x, y, dt), f(x, y))
    np.testing.assert_array_equal(elementwise_halves.binary(name, 1e-3, y, dt), f(dt.type(1e-3), y))
    np.testing.assert_array_equal(elementwise_halves.binary(name, x, 0.7, dt), f(x, dt.type(0.7)))
    # into an operand: each pattern has its own loop (module docstring of _PAIR's loops)
    for into_x, scalar in ((True, False), (False, False), (True, True), (False, True)):
        a, b = x.copy(), y.copy()
        if scalar:
            args = (a, 0.7) if into_x else (1e-3, b)
            want = f(a, dt.type(0.7)) if into_x else f(dt.type(1e-3), b)
        else:
            args, want = (a, b), f(a, b)
        target = a if into_x else b
        assert elementwise_halves.binary(name, *args, dt, out=target) is target
        np.testing.assert_array_equal(target, want)
    assert len(serial_launch) == 7


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(_UFUNCS))
def test_plan_calls_are_binary_bitwise(serial_launch, dtype, name):
    """`plan_calls` (an eager plan's whole call and in-place call): numpy's bits through the
    halves for every operand pattern, one launch each; the plan's own path (`general`,
    `general_into`) only where the halves may not run."""
    r = np.random.default_rng(5)
    x = r.standard_normal((317, 211)).astype(dtype)
    y = r.standard_normal((317, 211)).astype(dtype) + 3
    f, dt = _UFUNCS[name], np.dtype(dtype)
    fell = []
    call, into = elementwise_halves.plan_calls(name, dt, lambda a, b: fell.append("call") or f(a, b),
                                   lambda a, b, out: fell.append("into") or False)
    np.testing.assert_array_equal(call(1e-3, y), f(dt.type(1e-3), y))
    np.testing.assert_array_equal(call(x, 0.7), f(x, dt.type(0.7)))
    np.testing.assert_array_equal(call(x, y), f(x, y))
    a = x.copy()
    assert into(a, y, a)
    np.testing.assert_array_equal(a, f(x, y))
    a = x.copy()
    assert into(a, 0.7, a)
    np.testing.assert_array_equal(a, f(x, dt.type(0.7)))
    assert fell == [] and len(serial_launch) == 5
    # an operand overlapping the output elsewhere: the plan's own path decides
    flat = np.concatenate([x.reshape(-1), x.reshape(-1)[:7]])
    out, shifted = flat[:x.size].reshape(x.shape), flat[7:].reshape(x.shape)
    assert into(out, shifted, out) is False and fell == ["into"]
    # a non-contiguous operand, a Python int: `general`
    np.testing.assert_array_equal(call(x.T.copy().T, y), f(x, y))
    np.testing.assert_array_equal(call(2, y), f(2, y))
    assert fell == ["into", "call", "call"] and len(serial_launch) == 5


def test_plan_calls_leave_it_to_the_plan_when_cold_or_on_one_core(serial_launch, monkeypatch):
    """Past the warm window, with the switch off or the pool at one thread: no launch, the
    plan's own path for both calls, every operand pattern."""
    x = np.full((1000, 100), 3.0, np.float32)
    fell = []
    call, into = elementwise_halves.plan_calls("mul", np.dtype(np.float32), lambda a, b: fell.append("call") or a * b,
                                   lambda a, b, out: fell.append("into") or False)
    for obj, attr, value in ((halves, "_warm_until", 0.0), (halves, "on", lambda: False),
                             (sharepool, "pool_threads", lambda: 1)):
        with monkeypatch.context() as m:
            m.setattr(obj, attr, value)
            fell.clear()
            np.testing.assert_array_equal(call(0.5, x), np.float32(0.5) * x)
            np.testing.assert_array_equal(call(x, x), x * x)
            a = x.copy()
            assert into(a, x, a) is False and into(a, 0.5, a) is False
            assert fell == ["call", "call", "into", "into"], attr
    assert not serial_launch


def test_eager_update_takes_numpys_loop_when_cold(serial_launch, monkeypatch):
    """``w -= lr * g`` past the warm window (OpenBLAS's worker asleep): numpy's loop, no
    launch, the same bits as with the halves."""
    r = np.random.default_rng(6)
    g = r.standard_normal((1000, 100)).astype(np.float32)
    w0 = r.standard_normal((1000, 100)).astype(np.float32)
    want = w0 - np.float32(1e-3) * g
    for warm in (1e18, 0.0):
        monkeypatch.setattr(halves, "_warm_until", warm)
        w = tj.tensor(w0.copy(), requires_grad=True)
        with tj.no_grad():
            w -= 1e-3 * tj.tensor(g)
        np.testing.assert_array_equal(w.detach().numpy(), want)
    assert len(serial_launch) == 2     # (the warm round's two; the cold round none)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elementwise_halves_divide_by_zero_as_numpy(serial_launch, dtype):
    """x / 0 is inf (signed), 0 / 0 and inf / inf NaN, as numpy gives them: a zero divisor
    must not stop a half's loop (numba's default error model raises ZeroDivisionError,
    which a cfunc cannot pass on: the rest of its half would stay unwritten)."""
    dt = np.dtype(dtype)
    n = elementwise_halves.EW_MIN_ELEMENTS // 8 + 1
    x = np.tile(np.array([1.0, -2.0, 0.0, np.inf, 3.0, np.nan, -0.0, 5.0], dtype), n)
    y = np.tile(np.array([0.0, 0.0, 0.0, np.inf, -0.0, 1.0, 2.0, 0.5], dtype), n)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.divide(x, y)
        want_s = np.divide(x, dt.type(0.0))
        want_l = np.divide(dt.type(1.0), y)
    np.testing.assert_array_equal(elementwise_halves.binary("div", x, y, dt), want)
    np.testing.assert_array_equal(elementwise_halves.binary("div", x, 0.0, dt), want_s)
    np.testing.assert_array_equal(elementwise_halves.binary("div", 1.0, y, dt), want_l)
    a = x.copy()
    assert elementwise_halves.binary("div", a, y, dt, out=a) is a
    np.testing.assert_array_equal(a, want)
    assert len(serial_launch) == 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_elementwise_halves_take_scalars_as_numpy(serial_launch, dtype):
    """A Python float goes to the halves as its float64 bits and is rounded to the dtype
    there (as np.float32(s) rounds it); ints, numpy scalars and 0-d arrays are converted
    first. Values beyond float32's range, ties and tiny values included."""
    dt = np.dtype(dtype)
    x = np.random.default_rng(6).standard_normal(elementwise_halves.EW_MIN_ELEMENTS + 3).astype(dtype)
    scalars = [1e-6, 0.1, 1e39, -3e38, 1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, 1e-45, 7, -(2 ** 40) - 1,
               np.float64(0.3), np.float32(0.3), np.array(2.5), True]
    for s in scalars:
        with np.errstate(over="ignore"):
            want_r, want_l = np.multiply(x, dt.type(s)), np.subtract(dt.type(s), x)
        np.testing.assert_array_equal(elementwise_halves.binary("mul", x, s, dt), want_r, err_msg=repr(s))
        np.testing.assert_array_equal(elementwise_halves.binary("sub", s, x, dt), want_l, err_msg=repr(s))
    assert len(serial_launch) == 2 * len(scalars)


def test_elementwise_halves_stop_when_the_policy_drops(serial_launch, monkeypatch):
    """Warm and loaded, the elementwise halves still read the policy's count and the
    switch at every call."""
    x = np.ones((1000, 100), np.float32)
    f32 = np.dtype(np.float32)
    np.testing.assert_array_equal(elementwise_halves.binary("mul", x, 2.0, f32), 2 * x)
    assert len(serial_launch) == 1
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
    assert elementwise_halves.binary("mul", x, 2.0, f32) is None
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)
    monkeypatch.setenv("TRACEJIT_GEMM_HALVES", "0")
    assert elementwise_halves.binary("mul", x, 2.0, f32) is None
    assert len(serial_launch) == 1


def test_elementwise_halves_need_gotoblas_pthread(serial_launch, monkeypatch):
    """A pair without gotoblas_pthread's address (none found) launches nothing: numpy's
    loop runs (None), rather than a call to address 0."""
    x = np.ones((1000, 100), np.float32)
    monkeypatch.setattr(halves._pairs["float32"], "pthread", 0)
    assert elementwise_halves.binary("mul", x, 2.0, np.dtype(np.float32)) is None
    assert not serial_launch


def test_elementwise_it_leaves(serial_launch):
    x = np.ones((1000, 100), np.float32)
    f32 = np.dtype(np.float32)
    assert elementwise_halves.binary("pow", x, x, f32) is None
    assert elementwise_halves.binary("add", x[:100], x[:100], f32) is None      # below EW_MIN_ELEMENTS
    assert elementwise_halves.binary("add", x, x.T.copy().T, f32) is None       # not C-contiguous
    assert elementwise_halves.binary("add", x, x[:500], f32) is None            # another shape
    assert elementwise_halves.binary("add", x, x, np.dtype(np.float64)) is None  # not the compute dtype
    assert elementwise_halves.binary("add", 1.0, 2.0, f32) is None
    assert not serial_launch


def test_the_two_layer_step_runs_its_w1_path_in_halves(serial_launch):
    """Eager: the forward and weight-gradient products (router.matmul) and the update
    ``w1 -= lr * g`` (registry's binary and in-place paths): four launches; the update
    bitwise numpy's."""
    r = np.random.default_rng(4)
    x = tj.tensor(r.standard_normal((64, 1000)).astype(np.float32))
    w1 = tj.tensor(r.standard_normal((1000, 100)).astype(np.float32), requires_grad=True)
    h = x.mm(w1)
    np.testing.assert_allclose(h.detach().numpy(), x.numpy().astype(np.float64) @ w1.detach().numpy(),
                               rtol=1e-5, atol=1e-2)
    h.clamp(min=0).pow(2).sum().backward()
    assert len(serial_launch) == 2
    g = w1.grad.numpy().copy()
    w0 = w1.detach().numpy().copy()
    with tj.no_grad():
        w1 -= 1e-6 * w1.grad
    assert len(serial_launch) == 4
    np.testing.assert_array_equal(w1.detach().numpy(), w0 - np.float32(1e-6) * g)


def test_elementwise_halves_only_soon_after_a_launch(serial_launch, monkeypatch):
    """Past WARM_S since the last launch (OpenBLAS's worker asleep) numpy's loop runs; a
    product's halves make the next elementwise ones run."""
    x = np.ones((1000, 100), np.float32)
    f32 = np.dtype(np.float32)
    monkeypatch.setattr(halves, "WARM_S", 60.0)
    monkeypatch.setattr(halves, "_warm_until", 0.0)
    assert elementwise_halves.binary("mul", 2.0, x, f32) is None and not serial_launch
    halves.product(np.ones((64, 1000), np.float32), x)
    np.testing.assert_array_equal(elementwise_halves.binary("mul", 2.0, x, f32), 2 * x)
    assert len(serial_launch) == 2


def test_off_switch_and_one_thread(monkeypatch):
    """`ENABLED` off, or the pool giving one thread: no halves (the caller's path runs)."""
    a = np.ones((64, 1000), np.float32)
    b = np.ones((1000, 100), np.float32)
    monkeypatch.setenv("TRACEJIT_GEMM_HALVES", "0")
    assert halves.product(a, b) is None
    monkeypatch.setenv("TRACEJIT_GEMM_HALVES", "1")
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 1)
    assert halves.product(a, b) is None
    assert elementwise_halves.binary("add", b, b, np.dtype(np.float32)) is None
    np.testing.assert_array_equal(router.matmul(a, b), np.full((64, 100), 1000, np.float32))


@pytest.mark.skipif(sharepool.blas_worker.find() is None, reason="numpy's BLAS has no pthreads pool of two")
def _depth_sum(dtype, a, b):
    """What depth halves give: the one-thread kernel's product of each half of the depth
    (a's columns and b's rows split at k // 2), the second added to the first."""
    kernel = _loaded(dtype)[1]
    m, k = a.shape
    n = b.shape[1]
    h = k // 2
    parts = []
    for lo, hi in ((0, h), (h, k)):
        ac = np.ascontiguousarray(a[:, lo:hi])
        c = np.empty((m, n), dtype)
        kernel(ac.reshape(-1), hi - lo, 1, m, hi - lo, np.ascontiguousarray(b[lo:hi]).reshape(-1), n,
               c.reshape(-1))
        parts.append(c)
    return parts[0] + parts[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", [(64, 1000, 100), (37, 1001, 131), (1, 16385, 256), (9, 4099, 128)])
def test_depth_halves_add_the_partial_products_bitwise(serial_launch, dtype, m, k, n):
    """Depth halves add the second's partial product into the first's (inside the launch,
    `gemm_launch`): numpy's ``first + second`` bitwise."""
    r = np.random.default_rng(3)
    a = r.standard_normal((m, k)).astype(dtype)
    b = r.standard_normal((k, n)).astype(dtype)
    out = halves.product(a, b)
    assert serial_launch
    np.testing.assert_array_equal(out, _depth_sum(dtype, a, b))


@pytest.fixture
def real_launch(monkeypatch) -> None:
    """Two cores as far as the policy asks, the pair loaded from this session's kernels, and
    the real launch: record 1 on OpenBLAS's worker while record 0 runs here."""
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(sharepool, "pool_threads", lambda: 2)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(halves, "_kernel", lambda *a, **k: type("K", (), {"get": lambda self: _loaded(
        a[0][1])[2]})())
    monkeypatch.setattr(halves, "_pairs", {})


def test_depth_halves_on_openblas_worker_bitwise(real_launch):
    """The real launch (the second half on OpenBLAS's worker): the same sums."""
    r = np.random.default_rng(6)
    a = r.standard_normal((64, 1000)).astype(np.float32)
    b = r.standard_normal((1000, 100)).astype(np.float32)
    want = _depth_sum("float32", a, b)
    for _ in range(5):
        np.testing.assert_array_equal(halves.product(a, b), want)


def test_halves_at_once_on_openblas_worker(real_launch, monkeypatch):
    """The real launch: record 1 on OpenBLAS's worker while record 0 runs here."""
    monkeypatch.setattr(halves, "WARM_S", 60.0)      # (the checks between take longer)
    r = np.random.default_rng(5)
    x = r.standard_normal((1000, 64)).astype(np.float32).T
    g = r.standard_normal((64, 100)).astype(np.float32)
    w = r.standard_normal((1000, 100)).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(halves.product(x, w), x.astype(np.float64) @ w, rtol=1e-5, atol=1e-2)
        np.testing.assert_allclose(halves.product(x.T, g), x.T.astype(np.float64) @ g, rtol=1e-5, atol=1e-3)
        np.testing.assert_array_equal(elementwise_halves.binary("mul", 1e-6, w, np.dtype(np.float32)), np.float32(1e-6) * w)


@pytest.mark.parametrize("sync", [False, True])
def test_a_product_kept_on_one_thread_asks_for_the_module_in_background_mode(monkeypatch, sync):
    """A product in the halves' range while the policy gives one thread asks for their
    module once (background mode: recorded, not loaded in the call), so that `settle`
    loads it before the policy gives two; nothing in sync mode. Its value is the
    one-thread path's."""
    from tracejit.compiler.cpu.kernels import loader
    asks = []

    class Kernel:
        def get(self):
            asks.append("get")
            return None

    def kernel(key, make_source, sync_compiles=True, later=False):
        asks.append((key, sync_compiles, later))
        return Kernel()

    monkeypatch.setattr(coreshare, "ENABLED", True)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)
    monkeypatch.setattr(coreshare.core_share, "cpus", 2)
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(sharepool.blas_worker, "find", lambda: object())   # (a pool of two)
    monkeypatch.setenv("TRACEJIT_GEMM_HALVES", "1")
    monkeypatch.setattr(halves, "_kernel", kernel)
    monkeypatch.setattr(halves, "_pairs", {})
    monkeypatch.setattr(halves, "_expected", set())
    monkeypatch.setattr(router, "_halves_asked", set())
    monkeypatch.setattr(loader, "enabled", lambda: True)
    monkeypatch.setattr(loader, "_sync_mode", lambda: sync)
    a = np.ones((64, 1000), np.float32)
    b = np.ones((1000, 100), np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(router.matmul(a, b), np.full((64, 100), 1000, np.float32))
    # (rank LATER: behind every kernel another op or a plan asked for)
    assert asks == ([] if sync else [(("rows_gemm_halves", "float32"), False, True), "get"])
    small = np.ones((8, 16), np.float32)   # below the halves' range: never asks
    router.matmul(small, np.ones((16, 8), np.float32))
    assert len(asks) == (0 if sync else 2)
    # a head's gradient (skinny_gemm -> halves.thin) under one thread asks too, once per dtype
    monkeypatch.setattr(halves, "_expected", set())
    w = np.ones((256, 10))
    assert halves.thin(w.T.copy(), np.ones((256, 100))) is None
    assert halves.thin(w.T.copy(), np.ones((256, 100))) is None
    assert asks[2:] == ([] if sync else [(("rows_gemm_halves", "float64"), False, True), "get"])


def test_the_product_half_calls_the_serial_entry_by_address():
    """The halves module compiles no register-tile kernel of its own: its `kernel` is the template's
    serial entry's (one compiled function, one disk entry), which `gemm_half` calls through the
    address `_Pair` puts in the records' slot 15."""
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.runtime.voidptr import native_address
    from tracejit.compiler.cpu.gemm import template_panels
    mod = diskcache.load_module(halves.source("float32"), name_hint="native_rows_gemm_halves_float32")
    own = diskcache.load_module(template_panels.serial_source("float32"), name_hint="native_gemm_serial_float32")
    assert mod.gemm_kernel is own.kernel and len(own.kernel.signatures) == 1
    assert "_make_tile" not in halves.source("float32")
    assert halves.loaded_module(type("K", (), {"get": lambda self: mod.kernel})())[1] is vars(mod)
    pair = halves._Pair(vars(mod))
    assert list(pair.recs[:, 15]) == [native_address(own.kernel)] * 2
    # `ew_half`'s loops: compiled once each, their addresses in the table at slot 14
    assert list(pair.recs[:, 14]) == [pair.ew_loops.ctypes.data] * 2
    assert list(pair.ew_loops) == [native_address(getattr(mod, name)) for name in halves.EW_LOOPS]
    assert mod.gemm_half.address and mod.ew_half.address


@pytest.fixture
def plan_launch(serial_launch, monkeypatch) -> list:
    """`serial_launch` with the machine's checks `plan_product` reads itself: BLAS's ceiling
    two, OpenBLAS's worker found."""
    monkeypatch.setattr(coreshare, "blas_ceiling", lambda: 2)
    monkeypatch.setattr(sharepool.blas_worker, "find", lambda: object())
    return serial_launch


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n,trans", [(1000, 64, 100, True), (1000, 64, 100, False), (64, 1000, 100, False),
                                         (64, 999, 100, True), (203, 128, 197, False)])
def test_plan_product_is_product_bitwise(plan_launch, dtype, m, k, n, trans):
    """A compiled plan's product call (`plan_product`): `product`'s bits (row halves and
    depth halves, a C- or F-contiguous), one launch each, never its `general` path."""
    r = np.random.default_rng(7)
    a = r.standard_normal((k, m) if trans else (m, k)).astype(dtype)
    a = a.T if trans else a
    b = r.standard_normal((k, n)).astype(dtype)
    fell = []
    call = halves.plan_product(m, k, n, np.dtype(dtype), lambda x, y: fell.append(1) or x @ y)
    want = halves.product(a, b)
    assert len(plan_launch) == 1
    for _ in range(2):
        got = call(a, b)
        assert got.shape == (m, n) and got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    assert fell == [] and len(plan_launch) == 3
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, **_tol(dtype, k))


def test_plan_product_leaves_it_to_the_general_path(plan_launch, monkeypatch):
    """Every case `product` (or router.matmul before it) declines goes to `general`,
    whose answer the call returns; no launch. Shapes no halves take: `general` itself."""
    r = np.random.default_rng(8)
    a = r.standard_normal((64, 1000)).astype(np.float32)
    b = r.standard_normal((1000, 100)).astype(np.float32)
    fell = []

    def general(x, y):
        fell.append((x.shape, y.shape))
        return np.matmul(x, y)
    call = halves.plan_product(64, 1000, 100, np.dtype(np.float32), general)
    assert call is not general
    for obj, attr, value in ((halves, "on", lambda: False), (sharepool, "pool_threads", lambda: 1),
                             (halves, "_pairs", {}), (coreshare, "blas_ceiling", lambda: 1),
                             (sharepool.blas_worker, "find", lambda: None),
                             (sharepool, "try_launch", lambda: False)):
        with monkeypatch.context() as mp:
            mp.setattr(obj, attr, value)
            fell.clear()
            np.testing.assert_array_equal(call(a, b), np.matmul(a, b))
            assert fell == [((64, 1000), (1000, 100))], attr
    with monkeypatch.context() as mp:       # the policy at one thread (router.matmul's test)
        mp.setattr(coreshare, "ENABLED", True)
        mp.setattr(coreshare.core_share, "threads", lambda: 1)
        fell.clear()
        np.testing.assert_array_equal(call(a, b), np.matmul(a, b))
        assert fell == [((64, 1000), (1000, 100))]
    fell.clear()
    for x, y in ((a, np.asfortranarray(b)),                       # b not C-contiguous
                 (np.repeat(a, 2, axis=1)[:, ::2], b),                  # a neither C nor F
                 (a.astype(np.float64), b.astype(np.float64)),    # another dtype than the plan's
                 (a, b[:, :99].copy())):                           # another shape than the plan's
        np.testing.assert_array_equal(call(x, y), np.matmul(x, y))
    assert len(fell) == 4 and not plan_launch
    # shapes the halves never take: the general path itself
    assert halves.plan_product(64, 100, 100, np.float32, general) is general      # below MIN_MNK
    assert halves.plan_product(64, 1000, 64, np.float32, general) is general      # too few columns
    assert halves.plan_product(64, 1000, 100, np.int64, general) is general
    # a call's answer with a real launch is the general one's where it declines: ints
    assert call(a.astype(np.int64), b.astype(np.int64)).dtype == np.int64


def test_matmul_for_decides_the_route_once(plan_launch):
    """router.matmul_for: numpy's matmul below TINY_GEMM_MNK (what `matmul` calls there),
    the halves' plan call in their range, `matmul` for skinny and large products; each
    answers as `matmul` does."""
    assert router.matmul_for(64, 100, 10, np.float32) is np.matmul
    assert router.matmul_for(4096, 1024, 1024, np.float32) is router.matmul
    assert router.matmul_for(2048, 8, 2048, np.float32) is router.matmul   # a skinny kernel's
    r = np.random.default_rng(9)
    x = r.standard_normal((1000, 64)).astype(np.float32).T
    g = r.standard_normal((1000, 100)).astype(np.float32)
    call = router.matmul_for(64, 1000, 100, np.float32)
    assert call is not router.matmul
    np.testing.assert_array_equal(call(x, g), router.matmul(x, g))
    assert len(plan_launch) == 2


def test_compiled_two_layer_step_runs_its_products_through_the_plan_call(plan_launch, monkeypatch):
    """The compiled two-layer loss: its two large products launch through `plan_product`
    (two launches a call, router.matmul never asked), the small ones on numpy's matmul;
    the loss and gradients are bitwise those of the same plan built the way it was before
    (every product through router.matmul, which runs the same halves)."""
    r = np.random.default_rng(10)
    x = tj.tensor(r.standard_normal((64, 1000)).astype(np.float32))
    y = tj.tensor(r.standard_normal((64, 10)).astype(np.float32))
    w1 = tj.tensor((r.standard_normal((1000, 100)) * 0.03).astype(np.float32), requires_grad=True)
    w2 = tj.tensor((r.standard_normal((100, 10)) * 0.1).astype(np.float32), requires_grad=True)

    def loss_fn(x, y, w1, w2):
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
    seen = []
    general = router.matmul
    monkeypatch.setattr(router, "matmul", lambda a, b, *k: seen.append(a.shape) or general(a, b, *k))

    def run(fn):
        fn(x, y, w1, w2).backward()     # (the first call builds and loads the plan)
        w1.grad = w2.grad = None
        seen.clear()
        del plan_launch[:]
        loss = fn(x, y, w1, w2)
        loss.backward()
        out = [loss.detach().numpy(), w1.grad.numpy(), w2.grad.numpy()]
        w1.grad = w2.grad = None
        return out, list(seen), len(plan_launch)
    with monkeypatch.context() as mp:   # the plan as built before: router.matmul for each
        mp.setattr(router, "matmul_for", lambda m, k, n, dt: router.matmul)
        wants, seen_before, launched_before = run(tj.script(loss_fn))
    gots, seen_now, launched_now = run(tj.script(loss_fn))
    assert len(seen_before) == 5 and launched_before == 2
    assert seen_now == [] and launched_now == 2
    for g, w in zip(gots, wants):
        np.testing.assert_array_equal(g, w)
