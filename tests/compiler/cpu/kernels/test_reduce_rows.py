"""Sums and extrema over the last dims by the rows kernel (compiler/cpu/kernels/reduce_rows.py):
numpy's values (nan, inf and signed zeros included) for every row length it takes, the same
through eager tensors, autograd and a compiled program, and declines for what it does not take."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

import tracejit as tj  # noqa: E402
from special_values import eager_kernels_sync, with_specials  # noqa: E402,F401,F811
from tracejit.compiler.cpu.kernels import reduce_rows  # noqa: E402
from tracejit.ops.reductions import AMAX, AMIN, SUM  # noqa: E402

_NUMPY = {SUM: lambda x, d, k: np.add.reduce(x, axis=d, keepdims=k),
          AMAX: lambda x, d, k: x.max(axis=d, keepdims=k), AMIN: lambda x, d, k: x.min(axis=d, keepdims=k)}


@pytest.fixture(autouse=True)
def _loaded(monkeypatch, eager_kernels_sync):
    """The kernels loaded at their first ask (in sync mode they never compile in a call)."""
    real = reduce_rows._kernel

    def loading(key, make, **kw):
        kern = real(key, make, **kw)
        kern.load_now()
        return kern
    monkeypatch.setattr(reduce_rows, "_kernel", loading)


def test_a_call_never_compiles_on_the_callers_time(monkeypatch):
    """The kernel is asked for with ``sync_compiles=False``: under TRACEJIT_COMPILE=sync only
    a kernel on disk loads in the call; until one is loaded the call declines (numpy runs)."""
    monkeypatch.setattr(reduce_rows, "_loaded", {})
    asked = []

    class Unloaded:
        def get(self):
            return None

    monkeypatch.setattr(reduce_rows, "_kernel", lambda key, make, **kw: asked.append(kw) or Unloaded())
    assert reduce_rows.reduce_last(SUM)(np.ones((40, 3), np.float32), (1,), False) is None
    assert asked and all(kw.get("sync_compiles") is False for kw in asked)


@pytest.mark.parametrize("prim", [SUM, AMAX, AMIN], ids=lambda p: p.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,dims", [((32, 2), (1,)), ((4, 9, 3), (2,)), ((3, 14, 17), (2,)), ((4, 8, 4, 5), (2, 3)),
                                        ((300, 256), (1,)), ((33, 33), (1,))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_the_kernel_gives_numpys_values(prim, dtype, shape, dims, keepdim):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    if prim is not SUM:
        x = with_specials(x)
    got = reduce_rows.reduce_last(prim)(x, dims, keepdim)
    assert got is not None, "the kernel declined a call it takes"
    want = _NUMPY[prim](x, dims, keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype
    if prim is SUM:
        tol = 2e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(x).sum(axis=dims, keepdims=keepdim).max())
    else:
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_sums_of_special_values_are_numpys():
    x = with_specials(np.random.default_rng(1).standard_normal((40, 9)).astype(np.float32))
    got, want = reduce_rows.reduce_last(SUM)(x, (1,), False), np.add.reduce(x, axis=1)
    finite = np.isfinite(want)
    assert (~finite).any() and finite.any()
    np.testing.assert_array_equal(got[~finite], want[~finite])    # (nan where inf meets -inf)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)
    z = np.full((reduce_rows.ROWS_MIN, 4), -0.0, np.float32)
    # (a row of negative zeros sums to +0.0 in both: the sum starts at zero)
    assert not np.signbit(reduce_rows.reduce_last(SUM)(z, (1,), False)).any()


@pytest.mark.parametrize("x,dims", [
    (np.ones((4, 6), np.float32)[:, ::2], (1,)),              # strided
    (np.ones((4, 6), np.int64), (1,)),                         # integers
    (np.ones((4, 6), np.float32), (0,)),                       # not the last dim
    (np.ones((4, 6), np.float32), (0, 1)),                     # every dim
    (np.ones((4, 1), np.float32), (1,)),                       # rows of one value
    (np.ones((2, reduce_rows.ROW_MAX + 1), np.float32), (1,)),  # rows numpy runs faster
    (np.ones((0, 6), np.float32), (1,)),                       # no rows
    (np.ones((reduce_rows.ROWS_MIN - 1, 6), np.float32), (1,)),  # rows numpy runs as fast
])
def test_what_it_does_not_take_is_declined(x, dims):
    assert not reduce_rows.takes(x, dims, False)
    assert reduce_rows.reduce_last(SUM)(x, dims, False) is None


def test_eager_reductions_match_pytorch_values_and_gradients():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((6, 8, 3)).astype(np.float32)
    x[0, 0] = [1.0, 1.0, 0.5]    # a tie: the gradient is shared as PyTorch shares it
    res = []
    for L in (torch, tj):
        t = L.tensor(x, requires_grad=True)
        outs = [t.sum(-1), t.mean(-1, keepdim=True), t.amax(-1), t.amin((-2, -1)), t.sum((1, 2))]
        sum(((o * (k + 1)) ** 2).sum() for k, o in enumerate(outs)).backward()
        res.append([o.detach().numpy() for o in outs] + [t.grad.numpy()])
    for got, want in zip(res[1], res[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_compiled_programs_lone_reductions_give_eager_values():
    x = tj.tensor(np.random.default_rng(3).standard_normal((64, 3)).astype(np.float32))

    def f(x):
        return x.sum(-1), x.amax(-1, keepdim=True), x.amin(-1)
    for got, want in zip(tj.compile(f)(x), f(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
