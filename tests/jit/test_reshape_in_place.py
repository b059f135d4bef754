"""Shape changes in place (``unsqueeze_``, ``t_``, ``transpose_``, ``swapdims_``,
``as_strided_``, ``resize_``) inside a captured function (jit/view_writes.py
`reshape_in_place`): a value of the function's own takes the new shape as eagerly (and as
PyTorch); an argument's new shape cannot reach the caller, so that raises at capture,
naming the op, with the argument left as it was."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import TraceError

torch = pytest.importorskip("torch")

OPS = {"t_": lambda x: x.t_(), "unsqueeze_": lambda x: x.unsqueeze_(1), "transpose_": lambda x: x.transpose_(0, 1),
       "swapdims_": lambda x: x.swapdims_(0, 1), "as_strided_": lambda x: x.as_strided_((3, 2), (1, 3)),
       "resize_": lambda x: x.resize_(6), "squeeze_": lambda x: x.unsqueeze_(0).squeeze_(0)}
X = np.arange(6.0).reshape(2, 3)


def _same(got, want):
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_value_of_the_functions_own_changes_shape_as_in_pytorch(op):
    def f(x):
        y = x * 1
        OPS[op](y)
        v = y[0]            # a view taken after the change, then a write through y
        y.add_(1)
        return y * 2, v, x
    want = f(torch.tensor(X))
    g = tj.trace(f, compiler="interpret")
    for _ in range(2):
        for a, b in zip(g(tj.tensor(X)), want):
            _same(a, b)
    assert g.cache_stats()["compiles"] == 1


def test_a_view_of_an_argument_reshaped_in_place_still_writes_the_argument():
    def f(x):
        y = x[1:]
        y.unsqueeze_(2).transpose_(0, 2)
        y.mul_(10)
        return y + 0
    tx, jx = torch.tensor(X), tj.tensor(X)
    want = f(tx)
    _same(tj.trace(f, compiler="interpret")(jx), want)
    _same(jx, tx)


@pytest.mark.parametrize("op", sorted(set(OPS) - {"squeeze_"}))
def test_an_arguments_shape_change_raises_naming_the_op(op):
    def f(x):
        OPS[op](x)
        return x * 2
    x = tj.tensor(X)
    with pytest.raises(TraceError, match=rf"{op}.*an argument of the compiled function.*x = x\."):
        tj.trace(f, compiler="interpret")(x)
    _same(x, torch.tensor(X))


def test_a_no_op_squeeze_of_an_argument_is_fine():
    f = tj.trace(lambda x: x.squeeze_() * 2, compiler="interpret")
    _same(f(tj.tensor(X)), torch.tensor(X) * 2)


def test_a_value_an_earlier_view_shares_memory_with_raises():
    def f(x):
        y = x * 1
        v = y[0]
        y.t_()
        return y, v
    with pytest.raises(TraceError, match="t_.*another view shares memory"):
        tj.trace(f, compiler="interpret")(tj.tensor(X))


def test_a_value_made_after_a_viewed_one_died_changes_shape():
    def f(lib, x):   # (each viewed `a` dies; the view made next may take its address)
        y, out = x * 2.0, []
        for i in range(8):
            a = x * (i + 1.0)
            a.view(-1)
            del a
            c = y.view(3, 2)
            c.unsqueeze_(0)
            out.append(c * i)
        return lib.cat(out)
    got = tj.compile(lambda x: f(tj, x), fullgraph=True)(tj.tensor(X))
    _same(got, f(torch, torch.tensor(X)))
