"""embedding_bag (ops/embedding_bag.py) at its edges: no bags at all (PyTorch gives a (0, D)
result there, and crashes on its backward, so the expected values are written out)."""
import numpy as np
import pytest

import tracejit as tj


@pytest.mark.parametrize("offsets,last", [([0], True), ([], False)])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_no_bags_is_empty(offsets, last, mode):
    """Offsets that make no bag give a (0, D) result connected to the weight; the indices are
    not read (they made an index-add into zero bags raise)."""
    wt = tj.tensor(np.arange(10.0).reshape(5, 2), requires_grad=True)
    y = tj.nn.functional.embedding_bag(tj.tensor([4, 3, 2, 1]), wt, tj.tensor(offsets, dtype=tj.int64),
                                       mode=mode, include_last_offset=last)
    assert tuple(y.shape) == (0, 2) and y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(wt.grad.numpy(), np.zeros((5, 2)))


def test_embedding_bag_last_offset_without_offsets_says_so():
    with pytest.raises(ValueError, match="at least one offset"):
        tj.nn.functional.embedding_bag(tj.tensor([1, 2]), tj.ones(3, 2), tj.tensor([], dtype=tj.int64),
                                       include_last_offset=True)
