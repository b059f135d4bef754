"""split and chunk (ops/shape.py): views of the pieces, values and gradients as PyTorch's."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _pair(shape, seed=0, grad=True):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return torch.tensor(a).requires_grad_(grad), tj.tensor(a).requires_grad_(grad)


@pytest.mark.parametrize("args", [(1, 1), (2, -1), (3, 0), ([1, 4, 0, 2], 1), ([2, 1], -3)])
def test_split_matches_pytorch(args):
    size, dim = args
    shape = (3, 7, 4) if isinstance(size, int) else ((3, 7, 4) if dim == 1 else (3, 2, 4))
    t, x = _pair(shape)
    for _ in range(2):   # a first call and one through the kept plans
        tp, xp = t.split(size, dim), x.split(size, dim)
        assert [tuple(p.shape) for p in tp] == [tuple(p.shape) for p in xp]
        w = [np.random.default_rng(i).standard_normal(tuple(p.shape)).astype(np.float32)
             for i, p in enumerate(tp)]
        sum((p * torch.tensor(c)).sum() for p, c in zip(tp, w)).backward()
        sum((p * tj.tensor(c)).sum() for p, c in zip(xp, w)).backward()
        for a, b in zip(tp, xp):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy())
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)
        t.grad = x.grad = None


def test_split_pieces_are_views_of_a_non_contiguous_tensor():
    t, x = _pair((4, 6), grad=False)
    t, x = t.t(), x.t()
    for tp, xp in zip(t.split(2, 1), x.split(2, 1)):
        np.testing.assert_array_equal(xp.numpy(), tp.numpy())
    piece = x.split(2, 1)[1]
    with tj.no_grad():
        piece.fill_(7.0)
    assert (x[:, 2:4].numpy() == 7.0).all()


def test_chunk_matches_pytorch_and_empty_dims():
    t, x = _pair((2, 10))
    for n in (3, 4, 10, 12):
        assert [tuple(p.shape) for p in t.chunk(n, -1)] == [tuple(p.shape) for p in x.chunk(n, -1)]
    _, e = _pair((0, 3), grad=False)
    assert [tuple(p.shape) for p in e.split(2, 0)] == [(0, 3)]
    assert [tuple(p.shape) for p in e.chunk(2, 0)] == [(0, 3), (0, 3)]


def test_bad_sections_raise():
    x = tj.zeros(4, 3)
    with pytest.raises(Exception, match="add up"):
        x.split([1, 2], 0)
    with pytest.raises(ValueError, match="non-negative"):
        x.split([5, -1], 0)
    with pytest.raises(ValueError, match="positive"):
        x.split(0, 0)


BAD_COUNTS = [("chunk", (0,)), ("chunk", (-1,)), ("chunk", (2.0,)), ("split", (0,)), ("split", (-1,)),
              ("tensor_split", (0,)), ("tensor_split", (-1,))]


@pytest.mark.parametrize("method,args", BAD_COUNTS)
def test_bad_piece_counts_raise_pytorchs_exception_type(method, args):
    with pytest.raises((RuntimeError, TypeError)) as want:
        getattr(torch.ones(4), method)(*args)
    with pytest.raises((RuntimeError, TypeError)) as got:
        getattr(tj.ones(4), method)(*args)
    assert isinstance(got.value, type(want.value)), (got.value, want.value)


def test_empty_dims_split_by_zero_and_chunk_like_pytorch():
    assert [tuple(p.shape) for p in tj.empty(0).split(0)] == [(0,)]
    assert [tuple(p.shape) for p in tj.empty(0).chunk(3)] == [(0,)] * 3
    assert [tuple(p.shape) for p in tj.empty(0, 2).tensor_split(2)] == [(0, 2)] * 2


def test_sections_given_as_tensors_or_changing_ints_keep_their_offsets():
    """Sections as 0-d tensors eagerly, and ``[n, x.shape[0] - n]`` with a changing int `n`
    compiled: each piece starts after the ones before it, as PyTorch's (the second piece
    came back empty: the running offset was a tensor added to in place)."""
    a = np.arange(16, dtype=np.float32).reshape(8, 2)
    want = [p.numpy() for p in torch.tensor(a).split([torch.tensor(3), torch.tensor(5)])]
    got = [p.numpy() for p in tj.tensor(a).split([tj.tensor(3), tj.tensor(5)])]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    f = lambda x, n: x.split([n, x.shape[0] - n])[1].sum(0)   # noqa: E731
    cf = tj.compile(f)
    for n in (2, 3, 4, 6):
        np.testing.assert_array_equal(cf(tj.tensor(a), n).numpy(), f(torch.tensor(a), n).numpy())
