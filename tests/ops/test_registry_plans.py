"""Eager dispatch plans (ops/registry.py): which calls get one, and that a call taking a
plan gives what the general path gives."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import indexing


def test_basic_indexing_has_a_plan_per_index_spec():
    x = tj.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    indexing.GETITEM.plans.clear()
    first = [x[1].numpy().copy(), x[1:3, ::2].numpy().copy()]
    assert len(indexing.GETITEM.plans) == 2  # one per (shape, dtype, spec)
    # The second calls take the plans: the same values, and still views of x.
    assert np.array_equal(x[1].numpy(), first[0]) and np.array_equal(x[1:3, ::2].numpy(), first[1])
    assert np.array_equal(x[2].numpy(), np.arange(12, 18, dtype=np.float32))  # another spec
    v = x[1]
    assert v._base is x and v._vbox is x._vbox
    x.add_(1.0)
    assert v._version == x._version and v.numpy()[0] == 7.0


def test_a_spec_with_a_non_constant_item_takes_the_general_path():
    # A slice bound that is not a plain int (a 0-d numpy integer here) keeps no plan key.
    x = tj.tensor(np.arange(10, dtype=np.float32))
    indexing.GETITEM.plans.clear()
    r = x[np.int64(2):np.int64(5)]
    np.testing.assert_array_equal(r.numpy(), [2.0, 3.0, 4.0])
    assert r._base is x and not indexing.GETITEM.plans


@pytest.mark.parametrize("grad", [False, True])
def test_indexing_through_a_plan_records_its_gradient(grad):
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=grad)
    for _ in range(2):  # the second call takes the plan
        y = x[1]
    assert y.requires_grad is grad
    if grad:
        (y * 2).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [2, 2, 2]])
