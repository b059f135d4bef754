"""linalg.py composites on complex input: conjugated as PyTorch's (vecdot, Householder products)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")


def _c(r, *shape):
    return r.standard_normal(shape) + 1j * r.standard_normal(shape)


def test_vecdot_conjugates_its_first_argument():
    r = np.random.default_rng(0)
    x, y = _c(r, 3, 4), _c(r, 3, 4)
    want = torch.linalg.vecdot(torch.tensor(x), torch.tensor(y), dim=0).numpy()
    np.testing.assert_allclose(tj.linalg.vecdot(tj.tensor(x), tj.tensor(y), dim=0).numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_complex_householder_product_and_ormqr_as_pytorch(left, transpose):
    r = np.random.default_rng(1)
    a, tau = _c(r, 4, 3), _c(r, 3)
    other = _c(r, 4, 3) if left else _c(r, 3, 4)
    for fn in (lambda m, a, t, o: m.linalg.householder_product(a, t),
               lambda m, a, t, o: m.ormqr(a, t, o, left=left, transpose=transpose)):
        want = fn(torch, torch.tensor(a), torch.tensor(tau), torch.tensor(other)).numpy()
        got = fn(tj, tj.tensor(a), tj.tensor(tau), tj.tensor(other)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
