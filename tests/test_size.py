"""tracejit.Size indexes and slices as PyTorch's torch.Size: an int item, a Size slice."""
import numpy as np
import pytest

import tracejit as tj


def test_items_and_slices_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = tj.zeros(2, 3, 4, 5).shape, torch.zeros(2, 3, 4, 5).shape
    for i in (0, 3, -1, -4):
        assert type(ours[i]) is int and ours[i] == theirs[i]
    for sl in (slice(1, None), slice(None, -1), slice(None, None, -1), slice(1, 3), slice(5, 9)):
        got = ours[sl]
        assert type(got) is tj.Size and tuple(got) == tuple(theirs[sl])
        assert repr(got) == f"tj.Size({list(theirs[sl])})"
    assert type(ours[1:] + (7,)) is tj.Size and tuple(ours[:-1] + (7,)) == (2, 3, 4, 7)
    assert ours[2:].numel() == 20 and ours[:0].numel() == 1
    # items that are not ints become ints, as a Size made from them holds
    for extra in ((True,), (np.int64(7),), [7]):
        got = ours[:1] + extra
        assert type(got) is tj.Size and got == (2, int(extra[0])) and type(got[1]) is int


def test_bad_index_errors_as_a_tuple():
    s = tj.Size([2, 3])
    with pytest.raises(IndexError):
        s[2]
    with pytest.raises(TypeError):
        s["a"]
