"""nn.init.orthogonal_, sparse_, dirac_ and the deprecated names without underscore."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.nn import init


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (3, 2, 2)])
def test_orthogonal_rows_or_columns(shape):
    w = init.orthogonal_(tj.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
    small = min(w.shape)
    gram = w @ w.T if w.shape[0] == small else w.T @ w
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_sparse_zeroes_the_asked_fraction_of_each_column():
    w = init.sparse_(tj.empty(10, 5), sparsity=0.3).numpy()
    assert ((w == 0).sum(0) >= 3).all()


def test_dirac_is_the_identity_convolution():
    w = init.dirac_(tj.empty(3, 3, 3, 3))
    x = tj.randn(1, 3, 5, 5)
    np.testing.assert_allclose(tj.nn.functional.conv2d(x, w, padding=1).numpy(), x.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="3, 4 or 5-D"):
        init.dirac_(tj.empty(3, 3))


def test_deprecated_names_warn_and_work():
    with pytest.warns(FutureWarning, match="xavier_uniform_"):
        w = init.xavier_uniform(tj.empty(3, 4))
    assert float(w.abs().max()) > 0
