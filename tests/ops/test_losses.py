"""The deprecated ``size_average``/``reduce`` arguments of the losses that take them
(ops/losses.py `legacy_reduction`): the reduction they ask for, with PyTorch's warning,
as functions and as layers (they were accepted and ignored)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

A = np.random.default_rng(0).uniform(0.1, 0.9, (3, 4)).astype(np.float32)
B = np.random.default_rng(1).uniform(0.1, 0.9, (3, 4)).astype(np.float32)
SIGN = np.where(np.random.default_rng(2).random((3, 4)) > 0.5, 1.0, -1.0).astype(np.float32)
LOSSES = {
    "smooth_l1_loss": lambda F, m: F.smooth_l1_loss(m(A), m(B), **KW),
    "kl_div": lambda F, m: F.kl_div(m(A), m(B), **KW),
    "margin_ranking_loss": lambda F, m: F.margin_ranking_loss(m(A), m(B), m(SIGN), **KW),
    "hinge_embedding_loss": lambda F, m: F.hinge_embedding_loss(m(A), m(SIGN), **KW),
    "soft_margin_loss": lambda F, m: F.soft_margin_loss(m(A), m(SIGN), **KW),
    "multilabel_soft_margin_loss": lambda F, m: F.multilabel_soft_margin_loss(m(A), m(B), **KW),
    "poisson_nll_loss": lambda F, m: F.poisson_nll_loss(m(A), m(B), **KW),
    "triplet_margin_loss": lambda F, m: F.triplet_margin_loss(m(A), m(B), m(B[::-1].copy()), **KW),
}
KW: dict = {}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("kw", [{"size_average": False}, {"reduce": False}, {"size_average": True, "reduce": True},
                                {"size_average": False, "reduction": "none"}])
def test_size_average_and_reduce_choose_the_reduction_like_pytorch(name, kw):
    KW.clear()
    KW.update(kw)
    with pytest.warns(UserWarning, match="size_average and reduce"):
        want = LOSSES[name](torch.nn.functional, torch.tensor).numpy()
    with pytest.warns(UserWarning, match="size_average and reduce"):
        got = LOSSES[name](tj.nn.functional, tj.tensor).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer", ["SmoothL1Loss", "MarginRankingLoss", "HingeEmbeddingLoss", "KLDivLoss",
                                   "PoissonNLLLoss", "MultiMarginLoss"])
def test_loss_layers_take_size_average_and_reduce(layer):
    with pytest.warns(UserWarning):
        t = getattr(torch.nn, layer)(size_average=False)
    with pytest.warns(UserWarning):
        j = getattr(tj.nn, layer)(size_average=False)
    assert j.reduction == t.reduction == "sum"
    with pytest.warns(UserWarning):
        assert getattr(tj.nn, layer)(reduce=False).reduction == "none"


def test_triplet_margin_loss_wants_a_positive_margin():
    with pytest.raises(ValueError, match="margin"):
        torch.nn.functional.triplet_margin_loss(torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), margin=-1.0)
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        tj.nn.functional.triplet_margin_loss(tj.ones(2, 3), tj.ones(2, 3), tj.ones(2, 3), margin=-1.0)


def test_triplet_margin_with_distance_loss_wants_a_positive_margin():
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        tj.nn.functional.triplet_margin_with_distance_loss(tj.ones(2, 3), tj.ones(2, 3), tj.ones(2, 3), margin=0.0)


def test_cross_entropy_with_probabilities_refuses_an_ignore_index():
    x, p = np.zeros((2, 3), np.float32), np.full((2, 3), 1 / 3, np.float32)
    with pytest.raises(RuntimeError, match="ignore_index"):
        torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(p), ignore_index=1)
    with pytest.raises(RuntimeError, match="ignore_index"):
        tj.nn.functional.cross_entropy(tj.tensor(x), tj.tensor(p), ignore_index=1)
    assert abs(tj.nn.functional.cross_entropy(tj.tensor(x), tj.tensor(p)).item() - np.log(3)) < 1e-6


def _grads(lib, fn, vals, create_graph=False):
    """The value, gradient and (with create_graph) the gradient of sum(gradient * [0, 1, ..])."""
    x = lib.tensor(np.array(vals), requires_grad=True)
    y = fn(lib, x)
    (gx,) = lib.autograd.grad(y.sum(), x, create_graph=create_graph)
    out = [y.detach().numpy(), gx.detach().numpy()]
    if create_graph:
        (ggx,) = lib.autograd.grad((gx * lib.arange(gx.numel(), dtype=gx.dtype)).sum(), x)
        out.append(ggx.numpy())
    return out


@pytest.mark.parametrize("name", ["smooth_l1", "huber"])
def test_smooth_l1_and_huber_second_derivative_at_zero_difference(name):
    def fn(lib, x):
        F = lib.nn.functional
        t = lib.zeros_like(x)
        return F.smooth_l1_loss(x, t, beta=2.0) if name == "smooth_l1" else F.huber_loss(x, t, delta=2.0)
    vals = [2.0, -2.0, 0.0, 0.5, 3.0]
    for got, want in zip(_grads(tj, fn, vals, True), _grads(torch, fn, vals, True)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cosine_similarity_of_a_zero_vector_has_a_zero_gradient():
    def fn(lib, x):
        return lib.nn.functional.cosine_similarity(x.reshape(2, 2), lib.ones(2, 2, dtype=x.dtype))
    vals = [0.0, 0.0, 1.0, 2.0]
    for got, want in zip(_grads(tj, fn, vals), _grads(torch, fn, vals)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
