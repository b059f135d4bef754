"""Two independent products as one plan step (compiler/gemm_steps.py) and their runtime
(router.matmul_pair, compiler/cpu/gemm/halves.py's `pair`): which products a plan pairs (a layer's
input and weight gradients; not a product reading the other's result or a view of it, not
small or symbolic ones), and that the pair's results are the products' (numpy in float64 at
float32 tolerance on odd shapes and every operand layout, eager and the IR interpreter)
whichever of the two finishes first."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import router
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.threads import blas_threads, blas_threads_set
from tracejit.compiler.gemm_steps import GemmStep
from tracejit.compiler.cpu.gemm import halves
from tracejit.testing import assert_compiled_matches
from inputs import training_variant

pytest.importorskip("numba", reason="the pair's entries are numba code")
pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")

_entries: dict = {}


def _loaded(dtype: str):
    """The halves module's loaded entries for `dtype` (halves._Pair), from the session's cache."""
    if dtype not in _entries:
        from tracejit.compiler import diskcache
        mod = diskcache.load_module(halves.source(dtype), name_hint="native_rows_gemm_halves_" + dtype)
        _entries[dtype] = halves._Pair(vars(mod))
    return _entries[dtype]


@pytest.fixture(params=["first_done_first", "second_done_first"])
def ordered_pair(request, monkeypatch) -> list:
    """A pair's two products run on this thread one after the other, in the order the
    parameter names (on two cores either may finish first), whatever the machine's cores;
    the list records each launch's entry. Skips where numpy's BLAS is not an ILP64
    OpenBLAS (the pair does not run there: router.matmul_pair's fallback, tested below)."""
    if halves._gemm_function(np.dtype(np.float32)) is None:
        pytest.skip("numpy's BLAS has no ILP64 cblas GEMM")
    launches = _Launches()
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(halves, "_pair", lambda dt: _loaded(np.dtype(dt).name))
    order = (0, 1) if request.param == "first_done_first" else (1, 0)

    # the pair's launch calls gotoblas_pthread by address from numba (`pair_launch`): each
    # loaded pair's `pthread` is this runner instead, which runs the records in `order`
    def pthread(n, entry, args, stride):
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(entry)
        for q in order:
            fn(args + stride * q)
        launches.append(entry)
        launches.counts.append(blas_threads())   # (BLAS's count while the products ran)
        return 0
    runner = _PTHREAD(pthread)
    for t in ("float32", "float64"):
        monkeypatch.setattr(_loaded(t), "pthread", ctypes.cast(runner, ctypes.c_void_p).value)
    launches.runner = runner        # (kept alive as long as the list)
    return launches


class _Launches(list):
    def __init__(self):
        super().__init__()
        self.counts: list = []


_PTHREAD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


def _tol(dtype, k):
    return dict(rtol=1e-5, atol=1e-5 * k) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12 * k)


def _operand(rng, shape, dtype, layout):
    x = rng.standard_normal(shape).astype(dtype)
    return x if layout == "C" else np.asfortranarray(x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layouts", ["CC", "CF", "FC", "FF"])
def test_pair_computes_both_products_in_every_layout(ordered_pair, dtype, layouts):
    """g @ w and g.T @ a (a layer's gradients, odd shapes) on every operand layout: each
    the product numpy computes in float64, at the dtype's tolerance, in one launch."""
    rng = np.random.default_rng(0)
    m, k, n = 67, 263, 509
    g = _operand(rng, (m, k), dtype, layouts[0])
    w = _operand(rng, (k, n), dtype, layouts[1])
    a = _operand(rng, (m, n), dtype, "C")
    before = router.pairs_run
    c1, c2 = router.matmul_pair(g, w, g.T, a)
    assert router.pairs_run == before + 1 and len(ordered_pair) == 1
    assert ordered_pair == [_loaded(dtype).whole_address]
    assert c1.shape == (m, n) and c2.shape == (k, n) and c1.dtype == c2.dtype == np.dtype(dtype)
    assert c1.flags.c_contiguous and c2.flags.c_contiguous
    np.testing.assert_allclose(c1, g.astype(np.float64) @ w, **_tol(dtype, k))
    np.testing.assert_allclose(c2, g.T.astype(np.float64) @ a, **_tol(dtype, m))


@pytest.mark.parametrize("count", [1, 2])
def test_pair_runs_each_product_as_one_thread_blas_and_puts_the_count_back(ordered_pair, count):
    """The launch sets BLAS's count to one around the two products (read inside the run)
    and back to what it was after; each result is bitwise the one-thread BLAS product of
    the same operands (the same cblas call), in the MLP step's layer-2 layouts."""
    if blas_threads() is None:
        pytest.skip("no known BLAS thread count here")
    rng = np.random.default_rng(3)
    g = rng.standard_normal((96, 160)).astype(np.float32)
    w = rng.standard_normal((200, 160)).astype(np.float32).T   # F-contiguous (160, 200): x @ w.T
    h = rng.standard_normal((96, 200)).astype(np.float32)
    with blas_threads_set(count):
        p1, p2 = halves.pair(g, w, g.T, h)
        assert blas_threads() == count
    assert ordered_pair.counts == [1]
    with blas_threads_set(1):
        r1, r2 = np.matmul(g, w), np.matmul(g.T, h)
    assert np.array_equal(p1, r1) and np.array_equal(p2, r2)
    assert p1.flags.c_contiguous and p2.flags.c_contiguous


def test_no_count_change_from_another_thread_reaches_a_running_pair(monkeypatch):
    """While a pair's products run (on OpenBLAS's worker, in the real launch), another
    thread's change of BLAS's count waits until both ended: with a count above one, the
    worker's product would wait for BLAS's pool, which the other product holds. The
    launch here runs both records on this thread after another thread was asked to set
    the count to two (here it cannot before the pair ends); the change lands after it."""
    import threading
    from tracejit.threads import set_blas_threads
    if halves._gemm_function(np.dtype(np.float32)) is None or blas_threads() is None:
        pytest.skip("numpy's BLAS has no ILP64 cblas GEMM or no known thread count")
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(halves, "_pair", lambda dt: _loaded(np.dtype(dt).name))
    seen, done = [], threading.Event()
    other = threading.Thread(target=lambda: (set_blas_threads(2), done.set()), daemon=True)

    def pthread(n, entry, args, stride):
        other.start()
        done.wait(0.5)     # (the old launch let the change through at once)
        seen.append(blas_threads())
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(entry)
        for q in range(n):
            fn(args + stride * q)
        return 0
    runner = _PTHREAD(pthread)
    monkeypatch.setattr(_loaded("float32"), "pthread", ctypes.cast(runner, ctypes.c_void_p).value)
    rng = np.random.default_rng(4)
    g, w, a = (rng.standard_normal(s).astype(np.float32) for s in ((67, 263), (263, 509), (67, 509)))
    with blas_threads_set(1):
        c1, c2 = halves.pair(g, w, g.T, a)
        other.join(10)
        assert seen == [1] and not other.is_alive() and blas_threads() == 2
    np.testing.assert_allclose(c1, g.astype(np.float64) @ w, **_tol("float32", 263))
    np.testing.assert_allclose(c2, g.T.astype(np.float64) @ a, **_tol("float32", 67))


def test_the_pair_on_openblas_worker_computes_both_products(monkeypatch):
    """The real launch (this thread and OpenBLAS's worker at once, BLAS's count one around
    them, then put back), where numpy's BLAS has a worker: the same products as numpy's."""
    from tracejit.threads import blas_threads
    if halves._gemm_function(np.dtype(np.float32)) is None or not halves._blas_pair():
        pytest.skip("no ILP64 OpenBLAS with a pool of two here")
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    monkeypatch.setattr(halves, "_pair", lambda dt: _loaded(np.dtype(dt).name))
    rng = np.random.default_rng(5)
    g, w, a = (rng.standard_normal(s).astype(np.float32) for s in ((67, 263), (263, 509), (67, 509)))
    count = blas_threads()
    for _ in range(3):
        before = router.pairs_run
        c1, c2 = router.matmul_pair(g, w, g.T, a)
        assert router.pairs_run == before + 1 and blas_threads() == count
        np.testing.assert_allclose(c1, g.astype(np.float64) @ w, **_tol("float32", 263))
        np.testing.assert_allclose(c2, g.T.astype(np.float64) @ a, **_tol("float32", 67))


def test_pair_falls_back_to_one_product_after_the_other(ordered_pair, monkeypatch):
    """Small products, a 3-D operand, mixed dtypes, a strided operand, the switch off:
    router.matmul's products, no launch."""
    rng = np.random.default_rng(1)
    big = [rng.standard_normal(s).astype(np.float32) for s in ((67, 263), (263, 509))]
    cases = [
        [rng.standard_normal(s).astype(np.float32) for s in ((8, 9), (9, 10), (9, 8), (8, 10))],
        big + [rng.standard_normal((3, 67, 263)).astype(np.float32), big[1]],
        big + [big[0].astype(np.float64), big[1].astype(np.float64)],
        big + [np.ones((67, 526), np.float32)[:, ::2], big[1]],
    ]
    for a1, b1, a2, b2 in cases:
        c1, c2 = router.matmul_pair(a1, b1, a2, b2)
        np.testing.assert_allclose(c1, a1.astype(np.float64) @ b1, rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(c2, a2.astype(np.float64) @ b2, rtol=1e-5, atol=1e-3)
    assert ordered_pair == []
    monkeypatch.setenv("TRACEJIT_PAIR_AT_ONCE", "0")
    c1, c2 = router.matmul_pair(big[0], big[1], np.asfortranarray(big[0]), big[1])
    assert ordered_pair == []
    np.testing.assert_allclose(c2, big[0].astype(np.float64) @ big[1], rtol=1e-5, atol=1e-3)


def _pairs(cf):
    bwd = training_variant(cf)[1]
    return [it for it in bwd.items if isinstance(it, GemmStep) and len(it.products) == 2], bwd


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_a_layers_gradients_are_one_pair_agreeing_with_eager_and_the_interpreter(ordered_pair, mode):
    """A bias-free linear layer's backward (odd shapes, 8.97M multiply-adds each): its
    input and weight gradients are one `GemmStep` of two products, run as a pair, and the results
    agree with eager and the IR interpreter."""
    def layer(x, w):
        return tj.relu(F.linear(x, w))
    rng = np.random.default_rng(2)
    x = tj.tensor(rng.standard_normal((67, 509)).astype(np.float32), requires_grad=True)
    w = tj.tensor((rng.standard_normal((263, 509)) * 0.05).astype(np.float32), requires_grad=True)
    cf = assert_compiled_matches(layer, x, w, mode=mode, rtol=1e-4, atol=1e-4)
    (pair,), bwd = _pairs(cf)
    assert {p.out.aval.shape for p in pair.products} == {(67, 509), (263, 509)}
    assert "MATMUL2(" in bwd.source and "MATMUL(" not in bwd.source, bwd.source
    assert len(ordered_pair) == 2     # one pair per compiled call (assert_compiled_matches: two)


def test_the_pass_pairs_only_independent_large_static_products(monkeypatch):
    """Not paired: a product reading the first's result, or a view of it; products below
    router.PAIR_MNK; the switch off. Paired: the views in between that do not read the
    first move before the pair, those that do after it."""
    from tracejit.compiler.plan import Plan
    from test_backends import _graph

    def items(fn, *shapes):
        args = [tj.tensor(np.random.default_rng(i).standard_normal(s).astype(np.float32))
                for i, s in enumerate(shapes)]
        plan = Plan(_graph(fn, *args), "t")
        got = plan(*[a.numpy() for a in args])
        want = fn(*args)
        for g_, w_ in zip(got, want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g_, w_.numpy(), rtol=1e-4, atol=1e-3)
        return [("GemmStep2" if isinstance(it, GemmStep) and len(it.products) == 2 else type(it).__name__)
                if not hasattr(it, "prim") else it.prim.name for it in plan.items]

    big = ((67, 263), (263, 509), (67, 509))
    # independent: g @ w and g.T @ a, the transpose in between moves up
    assert items(lambda g, w, a: (g @ w, g.T @ a), *big) == ["permute", "GemmStep2"]
    # the second reads the first's result (through a transpose): no pair
    def chained(g, w, a):
        y = g @ w
        return y, y.T @ g
    assert items(chained, *big) == ["matmul", "permute", "matmul"]
    # a view of the first's result between them goes after the pair
    assert items(lambda g, w, a: ((g @ w).reshape(-1), g.T @ a), *big) == ["permute", "GemmStep2", "reshape"]
    # small products
    assert "GemmStep2" not in items(lambda g, w, a: (g @ w, g.T @ a), (7, 9), (9, 5), (7, 5))
    monkeypatch.setenv("TRACEJIT_GEMM_PAIRS", "0")
    assert "GemmStep2" not in items(lambda g, w, a: (g @ w, g.T @ a), *big)
