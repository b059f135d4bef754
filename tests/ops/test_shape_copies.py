"""Shape functions return new memory where PyTorch's do (flip, repeat) and views where
PyTorch's do: an in-place op on the result changes the input exactly when it would in
PyTorch. numpy's flip is a view, and ``y = x.flip(0); y.mul_(2)`` doubled x (a leaf that
requires grad too); ``x.repeat(1)`` returned x's own memory; a reshape that must copy
was taken for a view of its input, and an in-place op on it indexed the input's memory.
Inside a compiled function too: ``contiguous()`` of a contiguous tensor is the tensor
(the copy node stays in the graph, writes through either reach both)."""
import numpy as np
import pytest

import tracejit as tj

COPIES = {
    "flip": lambda x: x.flip(0),
    "flip_two_dims": lambda x: x.flip((0, 1)),
    "repeat_ones": lambda x: x.repeat(1, 1),
    "repeat": lambda x: x.repeat(2, 1),
    "reshape_of_transposed": lambda x: x.t().reshape(-1),   # numpy copies inside reshape
    # whole turns and no-ops copy too (they returned the input)
    "roll_whole_turn": lambda x: x.roll(4, 1),
    "roll_flat_whole_turn": lambda x: x.roll(12),
    "rot90_whole_turn": lambda x: x.rot90(4, (0, 1)),
    "diff_n0": lambda x: x.diff(n=0),
    "pad_nothing": lambda x: _functional(x).pad(x, (0, 0)),
}
VIEWS = {
    "t": lambda x: x.t(),
    "contiguous": lambda x: x.contiguous(),
    "reshape": lambda x: x.reshape(-1),
    "getitem": lambda x: x[1:],
}


def _functional(x):
    if isinstance(x, tj.Tensor):
        return tj.nn.functional
    import torch
    return torch.nn.functional


def _x(requires_grad=False):
    return tj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=requires_grad)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(COPIES))
def test_copying_shape_functions_leave_their_input_alone(name, compiled):
    fn = COPIES[name]
    f = tj.trace(fn, compile="sync") if compiled else fn
    x = _x()
    y = f(x)
    y.add_(100.0)
    np.testing.assert_array_equal(x.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    x = _x(requires_grad=True)     # a leaf that requires grad: its values stay too
    y = f(x)
    y.mul_(2.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.detach().numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))
    want = 2.0 * (2.0 if name == "repeat" else 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 4), want, np.float32))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_functions_share_their_inputs_memory(name, compiled):
    fn = VIEWS[name]
    # (compiled: the write happens inside, where the view must carry it to the input)
    f = tj.compile(lambda x: fn(x).add_(100.0)) if compiled else lambda x: fn(x).add_(100.0)
    x = _x()
    f(x)
    assert float(x.numpy()[-1, -1]) == 111.0


def test_the_same_as_pytorch():
    torch = pytest.importorskip("torch")
    for table, shares in ((COPIES, False), (VIEWS, True)):
        for name, fn in table.items():
            t = torch.arange(12.0).reshape(3, 4)
            fn(t).add_(100.0)
            assert (float(t[-1, -1]) != 11.0) == shares, name
            x = _x()
            fn(x).add_(100.0)
            assert (float(x.numpy()[-1, -1]) != 11.0) == shares, name


def test_in_place_on_a_copying_reshape_inside_a_graph_matches_pytorch():
    torch = pytest.importorskip("torch")
    grads = []
    for m in (torch, tj):
        x = m.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
        y = (x * 1).t().reshape(-1)
        y.add_(1.0)
        (y * m.arange(12.0, dtype=m.float64)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def _through_contiguous(x):
    y = x * 2.0
    z = y.contiguous()
    z[0] = -1.0        # reaches y
    y[:, 1].add_(10.0)  # seen through z
    w = y.t().contiguous()   # a copy: its writes stay there
    w.mul_(100.0)
    return y + 0.0, z * 1.0, (z * x).sum()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_writes_through_contiguous_of_a_value_as_pytorch(compiled):
    torch = pytest.importorskip("torch")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.tensor(data, requires_grad=True)
    want = _through_contiguous(t)
    want[2].backward()
    f = tj.compile(_through_contiguous) if compiled else _through_contiguous
    x = tj.tensor(data, requires_grad=True)
    got = f(x)
    got[2].backward()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())
