"""``tracejit.linalg.lstsq``: PyTorch's result fields and shapes for each CPU driver
(the default gelsy: solution, rank per matrix; no residuals or singular values)."""
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


_RNG = np.random.default_rng(2)
_TALL, _RHS = _RNG.standard_normal((5, 3)), _RNG.standard_normal((5, 2))


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("a,b,rcond", [
    (_TALL, _RHS, None), (_TALL.T.copy(), _RHS[:3], None), (np.stack([_TALL, 2 * _TALL]), np.stack([_RHS, _RHS]), None),
    (_TALL, _RHS[:, 0], None), (_TALL.astype(np.float32), _RHS.astype(np.float32), None),
    (np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]), np.ones((3, 1)), None), (_TALL, _RHS, 0.5),
    (_TALL + 1j * _TALL[::-1], _RHS + 0j, None)])
def test_lstsq_fields_per_driver_equal_pytorchs(driver, a, b, rcond):
    """Residuals (tall, full rank; not gelsy), rank (not gels), singular values (gelsd,
    gelss): they were always empty. (A truncating rcond with gelsy is left out: its
    pivoted-QR basic solution is not the pseudo-inverse's.)"""
    torch = pytest.importorskip("torch")
    if (driver == "gels" and a.shape == (3, 2)) or (rcond is not None and driver in (None, "gelsy")):
        pytest.skip("gels on a rank-deficient matrix, or gelsy's truncated solution, are LAPACK's own")
    t = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), rcond=rcond, driver=driver)
    r = tj.linalg.lstsq(tj.tensor(a), tj.tensor(b), rcond=rcond, driver=driver)
    for field in ("solution", "residuals", "rank", "singular_values"):
        x, y = getattr(t, field), getattr(r, field)
        assert tuple(y.shape) == tuple(x.shape) and str(y.dtype)[9:] == str(x.dtype)[6:], field
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-5, atol=1e-5, err_msg=field)


def test_lstsq_names_a_wrong_driver():
    with pytest.raises(ValueError, match="driver"):
        tj.linalg.lstsq(tj.ones(3, 2), tj.ones(3, 1), driver="gelsx")
