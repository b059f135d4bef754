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


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_at_the_ends_with_zero_and_unit_weights(reduction):
    # x at 0 and 1 against both targets: PyTorch clamps the log at -100 and the gradient's
    # denominator at 1e-12, so a zero weight gives 0 there, never NaN
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1e-30], np.float32)
    y = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0], np.float32)
    for w in (np.zeros(6, np.float32), np.array([1, 2, 0, 1, 3, 1], np.float32)):
        outs = []
        for lib, fn in ((torch, None), (tj, None), (tj, tj.compile)):
            xs = lib.tensor(x, requires_grad=True)

            def loss(a, b, c, lib=lib):
                return lib.nn.functional.binary_cross_entropy(a, b, weight=c, reduction=reduction)
            out = (fn(loss) if fn else loss)(xs, lib.tensor(y), lib.tensor(w))
            out.sum().backward()
            outs.append((out.detach().numpy(), xs.grad.numpy()))
        for value, grad in outs[1:]:
            assert np.isfinite(value).all() and np.isfinite(grad).all()
            np.testing.assert_allclose(value, outs[0][0], rtol=1e-6)
            np.testing.assert_allclose(grad, outs[0][1], rtol=1e-6)
