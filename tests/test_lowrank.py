"""lowrank.py's svd_lowrank and pca_lowrank against PyTorch: on matrices of rank below q the
randomized factors reproduce the matrix and their singular values (and gradients) equal
PyTorch's whatever the sketch drawn; wide, batched, centered and shifted (M) inputs."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_R = np.random.default_rng(0)
_LOW = _R.standard_normal((8, 3)) @ _R.standard_normal((3, 6))   # rank 3
_SHIFT = _R.standard_normal((1, 6))


@pytest.mark.parametrize("a", [_LOW, _LOW.T.copy(), np.stack([_LOW, 2 * _LOW])], ids=["tall", "wide", "batched"])
def test_svd_lowrank_matches_torch(a):
    got = []
    for m in (torch, tj):
        x = m.tensor(a, requires_grad=True)
        u, s, v = m.svd_lowrank(x, q=4)
        np.testing.assert_allclose(((u * s.unsqueeze(-2)) @ v.mT).detach().numpy(), a, atol=1e-9)
        s[..., :3].sum().backward()
        got.append((tuple(u.shape), tuple(s.shape), tuple(v.shape), s.detach().numpy(), x.grad.numpy()))
    assert got[1][:3] == got[0][:3]
    np.testing.assert_allclose(got[1][3], got[0][3], atol=1e-9)
    np.testing.assert_allclose(got[1][4], got[0][4], atol=1e-7)


def test_svd_lowrank_takes_away_m_and_pca_lowrank_centers():
    got = []
    for m in (torch, tj):
        shifted = m.svd_lowrank(m.tensor(_LOW + _SHIFT), q=3, M=m.tensor(_SHIFT))[1]
        pca = m.pca_lowrank(m.tensor(_LOW))
        got.append((shifted.numpy(), [tuple(t.shape) for t in pca], pca[1][:3].numpy()))
    np.testing.assert_allclose(got[1][0], got[0][0], atol=1e-9)
    assert got[1][1] == got[0][1]
    np.testing.assert_allclose(got[1][2], got[0][2], atol=1e-9)


def test_lowrank_names_a_bad_q():
    with pytest.raises(ValueError, match="q=7 must be between 0 and min"):
        tj.svd_lowrank(tj.ones(5, 6), q=7)
