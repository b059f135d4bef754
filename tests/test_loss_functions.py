"""The top-level loss spellings (torch.kl_div, torch.binary_cross_entropy_with_logits, ...)
against PyTorch's: integer reductions, the kernel's argument order, unreduced by default."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")
R = np.random.default_rng(0)
X, Y, Z = (R.random((3, 4)).astype(np.float32) for _ in range(3))
SIGN3 = np.sign(R.standard_normal(3)).astype(np.float32)
SIGN = np.sign(R.standard_normal((3, 4))).astype(np.float32)
CASES = [("kl_div", (X, Y)), ("kl_div", (X, Y, 2)), ("binary_cross_entropy_with_logits", (X, Y)),
         ("binary_cross_entropy_with_logits", (X, Y, None, None, 1)), ("hinge_embedding_loss", (X, SIGN)),
         ("hinge_embedding_loss", (X, SIGN, 0.5, 2)), ("margin_ranking_loss", (X, Y, SIGN)),
         ("triplet_margin_loss", (X, Y, Z)), ("triplet_margin_loss", (X, Y, Z, 1.0, 2.0, 1e-6, True, 1)),
         ("cosine_embedding_loss", (X, Y, SIGN3)), ("poisson_nll_loss", (X, Y, True, False, 1e-8, 0)),
         ("poisson_nll_loss", (X, Y, False, True, 1e-8, 1))]


@pytest.mark.parametrize("name, args", CASES, ids=[f"{n}{len(a)}" for n, a in CASES])
def test_same_shape_and_values_as_pytorch(name, args):
    ref = getattr(torch, name)(*[torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
    got = getattr(tj, name)(*[tj.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
    assert tuple(got.shape) == tuple(ref.shape)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_ctc_loss_is_per_sample_by_default_and_bad_reductions_are_refused():
    lp = np.log(np.full((6, 2, 5), 0.2, dtype=np.float32))
    args = ([[1, 2], [3, 4]], [6, 5], [2, 2])
    ref = torch.ctc_loss(torch.tensor(lp), *[torch.tensor(a) for a in args])
    got = tj.ctc_loss(tj.tensor(lp), *[tj.tensor(a) for a in args])
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction must be 0"):
        tj.kl_div(tj.tensor(X), tj.tensor(Y), 3)
    assert tuple(tj.nn.functional.kl_div(tj.tensor(X), tj.tensor(Y), reduction="sum").shape) == ()
