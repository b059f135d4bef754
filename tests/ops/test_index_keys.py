"""Index keys' specs (ops/index_keys.py): the spec of an index mixing integer tensors with
ints, slices, None and Ellipsis is kept per rank and item kinds, and a kept spec gives
the values the loop gives, read from each call's own tensors."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.ops import index_keys

torch = pytest.importorskip("torch")


def test_kept_spec_reads_each_calls_tensors():
    x = np.arange(4 * 6 * 8, dtype=np.float32).reshape(4, 6, 8)
    a = tj.tensor(x)
    key = index_keys._kept_key(a, (slice(None), tj.tensor([0]), tj.tensor([1])))
    index_keys._KEPT.pop(key, None)
    for j, k in (([0, 2], [1, 3]), ([5, 1], [7, 0]), ([-1], [2])):   # (the second and third: kept)
        got = a[:, tj.tensor(j), tj.tensor(k)].numpy()
        np.testing.assert_array_equal(got, torch.tensor(x)[:, torch.tensor(j), torch.tensor(k)].numpy())
    assert key in index_keys._KEPT


@pytest.mark.parametrize("index", [
    lambda t: (Ellipsis, t([4])), lambda t: (t([1, 0]), slice(1, 3)), lambda t: (None, 0, t([2, 2])),
    lambda t: (t([[0], [3]]), slice(None, None, 2), t([1, 2, 3]))])
def test_kept_spec_matches_torch(index):
    x = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    for _ in range(2):
        got = tj.tensor(x)[index(lambda v: tj.tensor(v))].numpy()
        want = torch.tensor(x)[index(lambda v: torch.tensor(v))].numpy()
        np.testing.assert_array_equal(got, want)


def test_masks_bools_and_errors_are_not_kept():
    a = tj.ones(3, 4)
    assert index_keys._kept_key(a, (tj.tensor([True, False, True]), 0)) is None
    assert index_keys._kept_key(a, (tj.tensor([1], dtype=tj.uint8), 0)) is None
    assert index_keys._kept_key(a, (True, tj.tensor([1]))) is None
    assert index_keys._kept_key(a, (0, 1)) is None   # (no tensor: indexing.py keeps those)
    assert index_keys._kept_key(a, (slice(0.5, None), tj.tensor([1]))) is None
    key = index_keys._kept_key(a, (0, 1, tj.tensor([0])))
    for _ in range(2):
        with pytest.raises(IndexError, match="too many indices"):
            a[0, 1, tj.tensor([0])]
    assert key not in index_keys._KEPT
