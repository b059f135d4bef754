"""Ops whose PyTorch results are row-major whatever their input's layout (reductions,
softmax, masked_fill, tril) give row-major results here too, so a later ``view`` works as
in PyTorch; repeat_interleave gives new memory for an expanded input."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

A = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)

VIEWS = {
    "transposed": lambda m, x: x.transpose(1, 3),
    "permuted": lambda m, x: x.permute(2, 0, 3, 1),
    "channels_last": lambda m, x: x.contiguous(memory_format=m.channels_last),
    "sliced": lambda m, x: x[:, 1:, :, ::2],
}
OPS = {
    "sum keepdim": lambda m, x: x.sum(-1, keepdim=True),
    "sum": lambda m, x: x.sum(1),
    "mean keepdim": lambda m, x: x.mean((2, 3), keepdim=True),
    "amax": lambda m, x: x.amax(0),
    "prod": lambda m, x: x.prod(2),
    "max values": lambda m, x: x.max(1, keepdim=True)[0],
    "argmin": lambda m, x: x.argmin(-1),
    "masked_fill": lambda m, x: x.masked_fill(x > 0, 0.5),
    "softmax": lambda m, x: x.softmax(1),
    "log_softmax": lambda m, x: x.log_softmax(1),
    "logsumexp": lambda m, x: x.logsumexp(1),
    "tril": lambda m, x: x.tril(),
    "triu": lambda m, x: x.triu(1),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("view", VIEWS)
def test_row_major_as_pytorchs(view, op, compiled):
    def fn(m, x):
        y = OPS[op](m, VIEWS[view](m, x))
        return y, y.view(-1)

    want = fn(torch, torch.tensor(A))
    got = (tj.compile(lambda x: fn(tj, x)) if compiled else lambda x: fn(tj, x))(tj.tensor(A))
    assert want[0].is_contiguous() and got[0].is_contiguous()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)


def test_repeat_interleave_of_an_expanded_input_is_new_memory():
    """Each copy is its own element, as PyTorch's: a write changes one."""
    def run(m):
        x = m.arange(4.0).reshape(2, 1, 2).expand(2, 3, 2)
        y = x.repeat_interleave(2, 1)
        y[0, 0, 0] = 100.0
        return y.numpy(), x.numpy()

    for got, want in zip(run(tj), run(torch)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cast", ["double", "long", "half", "bool"])
def test_a_cast_of_an_expanded_tensor_is_laid_out_as_pytorchs(cast):
    """Broadcast dims stay where they stand (numpy's astype puts them innermost), so
    ``mask[:, None].expand(...).float().view(...)`` works as in PyTorch."""
    def fn(m):
        x = m.tensor(A)[:, :1].expand(2, 3, 4, 5)
        outs = [getattr(x, cast)(), getattr(x.transpose(0, 3), cast)()]
        return outs + [outs[0].view(-1)]

    for got, want in zip(fn(tj), fn(torch)):
        assert got.stride() == want.stride()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
