"""linalg.matrix_norm / linalg.norm / norm over any pair of dims, against PyTorch: values,
shapes (keepdim) and gradients for every ord, the SVD-based ones included (they reduced
over the last two dims whatever `dim` said); tensorsolve with dims moved."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_A = np.random.default_rng(0).standard_normal((3, 4, 5))


@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, float("inf"), float("-inf")])
@pytest.mark.parametrize("dim", [(-2, -1), (0, 2), (2, 0), (1, 0)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("fn", ["linalg.matrix_norm", "linalg.norm"])
def test_matrix_norms_over_any_dims_match_torch(ord, dim, keepdim, fn):
    got = []
    for m in (torch, tj):
        x = m.tensor(_A, requires_grad=True)
        f = getattr(m.linalg, fn.split(".")[1])
        y = f(x, ord, dim, keepdim)
        y.sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
    assert got[1][0].shape == got[0][0].shape
    np.testing.assert_allclose(got[1][0], got[0][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1][1], got[0][1], rtol=1e-8, atol=1e-10)


def test_matrix_norm_names_equal_dims():
    with pytest.raises(ValueError, match="dims must be different"):
        tj.linalg.matrix_norm(tj.ones(2, 2), 2, dim=(1, -1))


@pytest.mark.parametrize("shape,b_shape,dims", [((2, 3, 6), (2, 3), None), ((2, 6, 3), (2, 3), (1,)),
                                                ((3, 2, 2, 3), (2, 3), (0, 2)), ((3, 2, 2, 3), (2, 3), (-4, -2))])
def test_tensorsolve_moves_dims_as_torch(shape, b_shape, dims):
    r = np.random.default_rng(1)
    a, b = r.standard_normal(shape), r.standard_normal(b_shape)
    want = torch.linalg.tensorsolve(torch.tensor(a), torch.tensor(b), dims=dims)
    got = tj.linalg.tensorsolve(tj.tensor(a), tj.tensor(b), dims=dims)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, atol=1e-10)
