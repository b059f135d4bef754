"""unique_consecutive against PyTorch: flat, and with ``dim`` (runs of equal slices),
with inverse indices and counts, and an empty input."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")
A = np.array([[1, 1, 2, 2, 2], [1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [0, 0, 0, 0, 0]])


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_unique_consecutive_matches_torch(dim):
    kw = {} if dim is None else {"dim": dim}
    got, want = (lib.unique_consecutive(lib.tensor(A), return_inverse=True, return_counts=True, **kw)
                 for lib in (tj, torch))
    for a, b in zip(got, want):
        assert a.numpy().tolist() == b.numpy().tolist()
    empty = np.zeros((0, 3), np.int64)
    got, want = (lib.unique_consecutive(lib.tensor(empty), return_counts=True, dim=0) for lib in (tj, torch))
    assert [tuple(t.shape) for t in got] == [tuple(t.shape) for t in want]
