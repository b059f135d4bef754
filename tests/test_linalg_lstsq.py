"""``tracejit.linalg.lstsq``: PyTorch's result fields and shapes for the default CPU
driver (solution, rank per matrix; no residuals or singular values)."""
import numpy as np
import pytest

import tracejit as tj


def test_lstsq_solution_and_rank_per_matrix():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5, 3)), rng.standard_normal((3, 5, 2))
    a[1, :, 2] = a[1, :, 1]                      # the second matrix has rank 2
    r = tj.linalg.lstsq(tj.tensor(a[0]), tj.tensor(b[0]))
    np.testing.assert_allclose(r.solution.numpy(), np.linalg.lstsq(a[0], b[0], rcond=None)[0], rtol=1e-10)
    assert r.rank.shape == () and r.rank.item() == 3
    rb = tj.linalg.lstsq(tj.tensor(a), tj.tensor(b))
    assert rb.rank.tolist() == [3, 2, 3] and rb.residuals.shape == (0,) and rb.singular_values.shape == (0,)


def test_lstsq_equals_pytorchs():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 6, 3))
    r, t = tj.linalg.lstsq(tj.tensor(a), tj.tensor(b)), torch.linalg.lstsq(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(r.solution.numpy(), t.solution.numpy(), rtol=1e-9, atol=1e-12)
    assert r.rank.tolist() == t.rank.tolist()
