"""Shape calls that change nothing (``squeeze`` without 1-dims, ``reshape`` to the same
shape, an identity ``permute``, ``x[...]``) return a new view, as PyTorch's: an in-place
metadata op on the result leaves the input alone, while memory, version counter and
gradient stay shared."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_CALLS = {
    "squeeze": lambda x: x.squeeze(),
    "squeeze_dim": lambda x: x.squeeze(0),
    "reshape": lambda x: x.reshape(x.shape),
    "reshape_as": lambda x: x.reshape_as(x),
    "view": lambda x: x.view(3, 4),
    "view_as": lambda x: x.view_as(x),
    "permute": lambda x: x.permute(0, 1),
    "transpose": lambda x: x.transpose(1, 1),
    "movedim": lambda x: x.movedim(0, 0),
    "expand": lambda x: x.expand(3, 4),
    "expand_as": lambda x: x.expand_as(x),
    "ellipsis": lambda x: x[...],
    "whole_slice": lambda x: x[:],
    "flatten_same": lambda x: x.flatten(1, 1),
}


def _pair():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    return tj.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_metadata_inplace_on_the_result_leaves_the_input_as_pytorch(name):
    x, tx = _pair()
    y, ty = _CALLS[name](x), _CALLS[name](tx)
    assert (y is x) == (ty is tx)
    y.unsqueeze_(0)
    ty.unsqueeze_(0)
    assert tuple(x.shape) == tuple(tx.shape) and tuple(y.shape) == tuple(ty.shape)


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_the_new_view_shares_memory_version_and_gradient(name):
    x = tj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = _CALLS[name](x)
    y.mul_(2)
    np.testing.assert_array_equal(x.numpy(), 2 * np.arange(12, dtype=np.float32).reshape(3, 4))
    assert x._version == y._version >= 1
    w = tj.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    tw = torch.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    (_CALLS[name](w) * 3).sum().backward()
    (_CALLS[name](tw) * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())


def test_an_attribute_set_on_a_squeezed_tensor_stays_on_it():
    x = tj.tensor(np.ones((3, 4), np.float32))
    y = x.squeeze()
    y.tag = "mine"
    assert not hasattr(x, "tag")
    y.t_()
    assert tuple(x.shape) == (3, 4) and tuple(y.shape) == (4, 3)
