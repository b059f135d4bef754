"""take_along_dim (ops/gather_prim.py) broadcasts its input and indices over the other dims,
as PyTorch's, with PyTorch's gradient, eagerly and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("index_shape, dim", [((1, 1, 2), 2), ((1, 3, 1), 2), ((2, 1, 4), 1), ((2, 1, 1), 0),
                                              ((1, 3, 2), -1)])
def test_take_along_dim_broadcasts_as_pytorch(index_shape, dim):
    x = np.arange(24.0).reshape(2, 3, 4)
    idx = np.random.default_rng(0).integers(0, x.shape[dim], index_shape)
    got = []
    for m, f in ((torch, torch.take_along_dim), (tj, tj.take_along_dim),
                 (tj, tj.compile(lambda a, i, d=dim: tj.take_along_dim(a, i, d)))):
        a = m.tensor(x, requires_grad=True)
        y = f(a, m.tensor(idx), dim) if m is torch or f is tj.take_along_dim else f(a, m.tensor(idx))
        (y * m.arange(float(y.numel())).reshape(y.shape)).sum().backward()
        got.append((y.detach().numpy(), a.grad.numpy()))
    for g in got[1:]:
        for u, w in zip(g, got[0]):
            np.testing.assert_array_equal(u, w)


@pytest.mark.parametrize("op", ["scatter_add", "scatter", "scatter_reduce"])
def test_scatter_reads_the_index_shaped_block_of_a_larger_src(op):
    idx = np.array([[0, 2], [2, 1]])
    def run(m, compiled):
        a = m.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        s = m.tensor(np.arange(1.0, 13.0).reshape(3, 4) * 10)   # (PyTorch's backward refuses its grad)
        def f(a, s, i):
            if op == "scatter_reduce":
                return a.scatter_reduce(0, i, s, "sum")
            return getattr(a, op)(0, i, s)
        y = (tj.compile(f) if compiled else f)(a, s, m.tensor(idx))
        (y * m.arange(12.0).reshape(3, 4)).sum().backward()
        return y.detach().numpy(), a.grad.numpy()
    want = run(torch, False)
    for compiled in (False, True):
        for u, w in zip(run(tj, compiled), want):
            np.testing.assert_array_equal(u, w)


@pytest.mark.parametrize("op", ["gather", "scatter_add", "scatter"])
def test_an_index_larger_than_self_beside_dim_raises(op):
    x, idx = tj.zeros(2, 3), tj.zeros(1, 4, dtype=tj.long)
    args = (0, idx) if op == "gather" else (0, idx, tj.ones(1, 4))
    with pytest.raises(RuntimeError, match="larger than self"):
        getattr(x, op)(*args)
    with pytest.raises(RuntimeError):
        getattr(torch.zeros(2, 3), op)(*((0, torch.zeros(1, 4, dtype=torch.long)) + ((torch.ones(1, 4),) if op != "gather" else ())))


def test_gather_takes_pytorchs_sparse_grad_keyword():
    def run(m):
        x = m.arange(6.0).reshape(2, 3).requires_grad_()
        i = m.tensor([[0, 0], [2, 1]])
        y = m.gather(x, 1, i, sparse_grad=False) + x.gather(1, i, sparse_grad=False) * 2
        (y * m.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        return y.detach().numpy(), x.grad.numpy()
    for u, w in zip(run(tj), run(torch)):
        np.testing.assert_array_equal(u, w)


@pytest.mark.parametrize("compiled", [False, True])
def test_take_along_dim_takes_an_index_modulo_the_dim_size_as_pytorch(compiled):
    idx = [[-1, 0, 7], [-5, 12, -9]]
    got = []
    for m in (torch, tj):
        a = m.tensor(np.arange(10.0).reshape(2, 5), requires_grad=True)
        f = lambda a, i: m.take_along_dim(a, i, 1)   # noqa: E731
        y = (tj.compile(f) if m is tj and compiled else f)(a, m.tensor(idx))
        (y * m.arange(6.0).reshape(2, 3)).sum().backward()
        got.append((y.detach().numpy(), a.grad.numpy()))
    for u, w in zip(got[1], got[0]):
        np.testing.assert_array_equal(u, w)
    with pytest.raises(IndexError):   # flattened, an index must be in range, as PyTorch's
        tj.take_along_dim(tj.arange(4.0), tj.tensor([-1]))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_a_small_gather_reads_any_layout_through_its_plan(dim):
    # the plan's flat read (gather_prim._gather_fast) of a transposed and a sliced input
    # gives PyTorch's values, and refuses an index out of range on every call
    base = np.random.default_rng(7).standard_normal((24, 40)).astype(np.float32)
    views = (lambda m, t: t, lambda m, t: t.t(), lambda m, t: t[2:18:2, 1:31:3])
    for view in views:
        xs = [view(m, m.tensor(base)) for m in (torch, tj)]
        n = xs[0].shape[dim]
        idx = np.random.default_rng(8).integers(0, n, (5, 4))
        for _ in range(3):   # the second and third calls take the plan
            want = torch.gather(xs[0], dim, torch.tensor(idx)).numpy()
            got = xs[1].gather(dim, tj.tensor(idx)).numpy()
            assert got.flags.c_contiguous
            np.testing.assert_array_equal(got, want)
        bad = idx.copy()
        bad[1, 2] = n
        for _ in range(2):
            with pytest.raises(IndexError, match=f"index {n} is out of range"):
                xs[1].gather(dim, tj.tensor(bad))


def test_flat_positions_of_an_expanded_index_are_its_copys():
    from tracejit.ops.gather_prim import _flat_positions
    r = np.random.default_rng(2)
    base = r.integers(0, 5, (6, 1, 3))
    views = [(np.broadcast_to(base, (6, 4, 3)), 0, (7, 4, 3)),       # expanded over dim 1
             (np.broadcast_to(base, (6, 4, 3)), 1, (6, 5, 3)),       # expanded along dim itself
             (np.broadcast_to(base[:, :, :1], (6, 4, 3)), 2, (6, 4, 5)),
             (np.broadcast_to(base[:1, :, :1], (6, 4, 3)), 0, (9, 4, 3))]
    for view, dim, shape in views:
        assert 0 in view.strides
        got = _flat_positions(view, dim, shape)
        want = _flat_positions(np.ascontiguousarray(view), dim, shape)
        assert got.shape == view.shape and got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
