"""AccumulateGrad takes a gradient's memory only when nobody else can see it."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj


class _Backward(tj.autograd.Function):
    """Identity whose backward returns ``make(g)`` (set by each test)."""
    make = None

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        return _Backward.make(g)


def test_an_exclusive_gradient_is_taken_without_a_copy():
    ids = []

    def fresh(g):  # a brand-new array; only its id is remembered
        arr = np.array(g.numpy() * 3.0)
        ids.append(id(arr))
        return tj.from_numpy(arr)
    _Backward.make = staticmethod(fresh)
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    _Backward.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    assert id(x.grad._data) == ids[0]


def test_the_users_gradient_tensor_is_never_taken():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    g = tj.ones(2)
    x.backward(g)                                   # the root is the leaf itself
    assert not np.shares_memory(x.grad.numpy(), g.numpy())
    x.grad.add_(5.0)
    np.testing.assert_array_equal(g.numpy(), [1.0, 1.0])
    x.grad = None
    (x + 0).backward(g)                             # add passes the cotangent through
    assert not np.shares_memory(x.grad.numpy(), g.numpy())


def test_one_gradient_reaching_two_leaves_is_not_shared():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = tj.tensor([3.0, 4.0], requires_grad=True)
    (x + y).sum().backward()                        # add's VJP gives both the same tensor
    assert not np.shares_memory(x.grad.numpy(), y.grad.numpy())
    x.grad.add_(1.0)
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])


def test_broadcast_and_view_gradients_are_copied_into_owned_memory():
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x.expand(4, 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])
    arr = x.grad.numpy()
    assert arr.strides == (4,) and arr.flags.writeable
    assert arr.base is None or arr.base.size == arr.size   # owned, or a whole-buffer reshape
    x.grad.add_(1.0)                                # writable, not a stride-0 view
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0, 5.0])


def test_a_gradient_kept_by_a_hook_is_copied():
    kept = []
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda g: kept.append(g))
    y.sum().backward()
    z = tj.tensor([1.0, 1.0], requires_grad=True)
    w = z * 1.0
    w.register_hook(lambda g: kept.append(g) or g)  # the hook's return value reaches z
    w.sum().backward()
    assert not np.shares_memory(z.grad.numpy(), kept[-1].numpy())


def test_a_reshaped_whole_buffer_is_taken_but_a_partial_view_is_not():
    # A compiled backward returns a bias-like gradient as a reshape of its reduction
    # buffer (a view of all of it, held by nothing else): .grad takes the view as is.
    b = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = tj.ones(4, 3)
    tj.trace(lambda x, b: x * b)(x, b).backward(tj.ones(4, 3))
    arr = b.grad.numpy()
    np.testing.assert_array_equal(arr, [4.0, 4.0, 4.0])
    assert arr.base is not None and arr.base.size == arr.size   # not a copy
    b.grad.add_(1.0)
    np.testing.assert_array_equal(b.grad.numpy(), [5.0, 5.0, 5.0])
    x = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    # One row of a bigger buffer: taking it would keep the rest alive; it is copied.
    _Backward.make = staticmethod(lambda g: tj.from_numpy(np.stack([g.numpy() * 0, g.numpy() * 2.0]))[1])
    _Backward.apply(x).sum().backward()
    arr = x.grad.numpy()
    np.testing.assert_array_equal(arr, [2.0, 2.0, 2.0])
    assert arr.base is None                              # copied out


def test_a_taken_gradient_still_has_to_fit_a_leaf_changed_since_recording():
    # The exclusive gradient becomes .grad without the setter only when it matches the
    # leaf; a leaf whose data was replaced after the graph was recorded gets the setter's
    # error, not a .grad of the old shape.
    x = tj.ones(2, requires_grad=True)
    loss = (x * 2).sum()
    x.data = tj.ones(3)
    with pytest.raises(RuntimeError, match=r"assigned grad has float32\[2\].*float32\[3\]"):
        loss.backward()
    assert x.grad is None
    y = tj.ones(2, requires_grad=True)
    (y * 2).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])
    assert y.grad.shape == (2,) and y.grad.dtype is tj.float32
