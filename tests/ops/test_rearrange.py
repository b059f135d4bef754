"""diagonal (ops/rearrange.py) is a view of any input (contiguous or not) for any pair of dims:
writes into it reach the input, as in PyTorch, eagerly and compiled."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

CASES = [((2, 2), (0, 1, 0)), ((2, 2, 3), (0, 0, 1)), ((2, 3, 4), (1, 2, 0)), ((3, 4), (-1, 1, 0)),
         ((2, 3, 4), (0, -1, 0)), ((3, 4), (1, 0, 1))]


def _check_writes(a, pick, args):
    """Eager and compiled: ``pick(x).diagonal(*args).mul_(-1)`` reaches `x` as in PyTorch."""
    def f(x):
        d = pick(x).diagonal(*args)
        d.mul_(-1)
        return d * 2

    want_x = torch.tensor(a)
    want = f(want_x)
    for fn in (f, tj.compile(f)):
        x = tj.tensor(a)
        np.testing.assert_array_equal(fn(x).numpy(), want.numpy())
        np.testing.assert_array_equal(x.numpy(), want_x.numpy())


@pytest.mark.parametrize("shape,args", CASES)
def test_writes_through_a_diagonal_reach_the_input(shape, args):
    _check_writes(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), lambda m: m, args)


@pytest.mark.parametrize("shape,args", CASES)
def test_diagonal_gradient_matches_pytorch(shape, args):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t, j = torch.tensor(a, requires_grad=True), tj.tensor(a, requires_grad=True)
    td = t.diagonal(*args)
    w = np.arange(td.numel(), dtype=np.float32).reshape(tuple(td.shape))
    (td * torch.tensor(w)).sum().backward()
    (j.diagonal(*args) * tj.tensor(w)).sum().backward()
    np.testing.assert_array_equal(j.grad.numpy(), t.grad.numpy())


STRIDED = [(lambda m: m.select(1, 3), (0, 0, 1)), (lambda m: m.select(1, 3), (1, 1, 0)),
           (lambda m: m.transpose(0, 2), (-1, 2, 1)), (lambda m: m[::2, 1:], (1, -1, 0))]


@pytest.mark.parametrize("pick,args", STRIDED)
def test_writes_through_a_diagonal_of_a_strided_input_reach_it(pick, args):
    a = np.arange(64, dtype=np.float32).reshape(4, 4, 4)
    _check_writes(a, pick, args)
    t, j = torch.tensor(a, requires_grad=True), tj.tensor(a, requires_grad=True)
    (pick(t).diagonal(*args) * 3).sum().backward()
    (pick(j).diagonal(*args) * 3).sum().backward()
    np.testing.assert_array_equal(j.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("offset", [0, 1, -1])
def test_diag_of_a_matrix_is_a_copy(offset):
    """torch.diag copies (diagonal() is the view): a later write to the matrix stays out."""
    for m in (torch, tj):
        x = m.arange(12.0).reshape(3, 4)
        d = m.diag(x, offset)
        want = torch.arange(12.0).reshape(3, 4).diag(offset).tolist()
        x.mul_(2)
        assert d.tolist() == want, m.__name__


@pytest.mark.parametrize("shape, dim, sizes", [((0, 2), -1, (-1, 1)), ((0, 0, 2, 1), 0, (1, -1)),
                                               ((1, 0, 7, 0), 0, (1, -1)), ((0, 6), 1, (-1, 3))])
def test_unflatten_infers_minus_one_within_the_dim_beside_empty_dims(shape, dim, sizes):
    # (a reshape of the whole shape cannot infer -1 where another dim is 0)
    assert tuple(tj.zeros(shape).unflatten(dim, sizes).shape) == tuple(torch.zeros(shape).unflatten(dim, sizes).shape)


@pytest.mark.parametrize("shape,offset", [((0, 4), 0), ((3, 4), 5), ((2, 0, 3), 0), ((3, 4), -3)])
def test_empty_diagonal_stays_in_the_graph_as_torch(shape, offset):
    torch = pytest.importorskip("torch")
    for lib in (torch, tj):
        x = lib.zeros(shape, requires_grad=True)
        d = x.diagonal(offset)
        assert d.requires_grad and tuple(d.shape) == tuple(torch.zeros(shape).diagonal(offset).shape)
        d.sum().backward()
        assert tuple(x.grad.shape) == shape and float(x.grad.abs().sum()) == 0.0


def test_movedim_of_a_0_dim_tensor_is_the_tensor_as_torch():
    x = tj.tensor(1.5)
    for src, dst in ((0, -1), ([0], [0]), (-1, 0)):
        assert tj.movedim(x, src, dst).shape == () and tj.movedim(x, src, dst).item() == 1.5
        assert tj.compile(lambda t: t.movedim(src, dst))(x).item() == 1.5


@pytest.mark.parametrize("args, kwargs, reps", [((1, 2, 1), {}, (1, 2, 1)), (((1, 2, 1),), {}, (1, 2, 1)),
                                               (([2],), {}, (2,)), ((2,), {}, (2,)),
                                               ((), {"dims": (1, 2)}, (1, 2)), ((2, 1, 1, 3), {}, (2, 1, 1, 3))])
def test_tile_takes_its_dims_as_pytorch(args, kwargs, reps):
    a = np.arange(6.0).reshape(2, 3, 1)
    out = tj.tensor(a).tile(*args, **kwargs)
    np.testing.assert_array_equal(out.numpy(), np.tile(a, reps))   # numpy's tile is PyTorch's rule
    np.testing.assert_array_equal(tj.tile(tj.tensor(a), reps).numpy(), np.tile(a, reps))


def test_tile_without_dims_names_the_argument():
    with pytest.raises(TypeError, match="dims"):
        tj.ones(2).tile()


def test_diag_of_an_empty_vector_stays_on_the_graph():
    x = tj.zeros(0, requires_grad=True)
    for d in (0, 1):
        y = tj.diag(x, d)
        assert tuple(y.shape) == (d, d) and y.requires_grad
        y.sum().backward()
    assert tuple(x.grad.shape) == (0,)


def test_tensor_split_reads_a_0d_tensor_as_the_number_of_sections():
    def shapes(m):
        a = m.arange(12.0).reshape(3, 4)
        return [tuple(t.shape) for t in (*a.tensor_split(m.tensor(3), 1), *m.hsplit(a, m.tensor(2)),
                                          *m.tensor_split(a, np.int64(2), dim=0))]

    assert shapes(tj) == shapes(torch)


def test_roll_by_a_changing_int_shift_captures_once_for_every_shift_inside_the_dim():
    """``x.roll(n, 0)`` with a new shift each call: one capture serves every 2 <= n < 10 (the
    shift symbolic, guarded inside the dim), with PyTorch's values and gradients."""
    f = lambda x, n: (x.roll(n, 0) * x.new_tensor(np.arange(10.0))[:, None]).sum()   # noqa: E731
    cf = tj.compile(f)
    v = np.random.default_rng(0).standard_normal((10, 2))
    for n in (2, 3, 4, 5, 7, 9):
        x, xt = tj.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = cf(x, n), f(xt, n)
        np.testing.assert_allclose(y.item(), yt.item(), rtol=1e-12)
        y.backward(), yt.backward()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]


def test_unflatten_by_a_changing_size_captures_twice():
    """``x.unflatten(1, (h, -1))`` with a new int h, and ``(x.shape[1] // 2, 2)`` with a new
    length, each call: the sizes stay symbolic (one capture after the first), PyTorch's values."""
    fs = [lambda x, h: x.unflatten(1, (h, -1)).sum(2), lambda x, h: x.unflatten(1, (x.shape[1] // 2, 2)) * h]
    for f, shapes in zip(fs, [[(2, 12, h) for h in (2, 3, 4, 6)], [(2, 2 * n, 3) for n in (2, 3, 5, 8)]]):
        cf = tj.compile(f)
        for rows, cols, h in shapes:
            v = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
            np.testing.assert_array_equal(cf(tj.tensor(v), h).numpy(), f(torch.tensor(v), h).numpy())
        assert cf.cache_stats()["compiles"] == 2, cf.cache_stats()["recompile_reasons"]
    with pytest.raises(TypeError, match=r"unflatten: sizes must be ints, got \(2.0, 3\)"):
        tj.ones(4, 6).unflatten(1, (2.0, 3))
