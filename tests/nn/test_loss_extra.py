"""Loss/distance modules against PyTorch's (values and input gradients for each option set)."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import ShapeError
from tracejit import nn

torch = pytest.importorskip("torch", reason="loss modules are checked against PyTorch")

rng = np.random.default_rng(0)
X, Y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
A, B, C = rng.standard_normal((4, 5)), rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
S = np.where(rng.random(4) > 0.5, 1.0, -1.0)
LOGP = np.log(rng.dirichlet(np.ones(5), 4))
P = rng.dirichlet(np.ones(5), 4)

CASES = [
    ("SmoothL1Loss", {"beta": 0.5}, (X, Y), 2), ("SmoothL1Loss", {"reduction": "sum"}, (X, Y), 2),
    ("HuberLoss", {"delta": 0.7, "reduction": "none"}, (X, Y), 2),
    ("KLDivLoss", {"reduction": "batchmean"}, (LOGP, P), 2),
    ("KLDivLoss", {"reduction": "sum", "log_target": True}, (LOGP, np.log(P)), 2),
    ("KLDivLoss", {"reduction": "none"}, (LOGP, P), 2),
    ("MarginRankingLoss", {"margin": 0.2}, (X[:, 0], Y[:, 0], S), 2),
    ("TripletMarginLoss", {"margin": 0.5, "swap": True}, (A, B, C), 3),
    ("TripletMarginLoss", {"p": 1.0, "reduction": "none"}, (A, B, C), 3),
    ("HingeEmbeddingLoss", {"margin": 0.5}, (X, np.where(Y > 0, 1.0, -1.0)), 1),
    ("CosineEmbeddingLoss", {"margin": 0.1}, (A, B, S), 2),
    ("CosineSimilarity", {"dim": 1}, (A, B), 2), ("CosineSimilarity", {"dim": 0}, (A, B), 2),
    ("PairwiseDistance", {"p": 3.0, "keepdim": True}, (A, B), 2),
]


@pytest.mark.parametrize("name,kw,args,ngrad", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_loss_module_matches_torch(name, kw, args, ngrad):
    ta = [torch.tensor(a, requires_grad=i < ngrad) for i, a in enumerate(args)]
    ja = [tj.tensor(a, requires_grad=i < ngrad) for i, a in enumerate(args)]
    yt, yj = getattr(torch.nn, name)(**kw)(*ta), getattr(nn, name)(**kw)(*ja)
    np.testing.assert_allclose(yj.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    (yt * 1.5).sum().backward()
    (yj * 1.5).sum().backward()
    for i in range(ngrad):
        np.testing.assert_allclose(ja[i].grad.numpy(), ta[i].grad.numpy(), rtol=1e-9, atol=1e-12)


def test_kl_div_mean_warns_like_torch():
    with pytest.warns(UserWarning, match="batchmean"):
        tj.nn.functional.kl_div(tj.tensor(LOGP), tj.tensor(P))


def test_bad_reduction_names_loss():
    with pytest.raises(ValueError, match="KLDivLoss: reduction"):
        nn.KLDivLoss(reduction="avg")
    with pytest.raises(ValueError, match="HuberLoss: reduction"):
        nn.HuberLoss(reduction="avg")


@pytest.mark.parametrize("bias, out_features", [(False, ()), (True, ()), (True, (3,))])
def test_linear_cross_entropy_loss_matches_pytorch(bias, out_features):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(0)
    ref = torch.nn.LinearCrossEntropyLoss(4, 6, out_features=out_features, bias=bias, label_smoothing=0.1)
    mod = tj.nn.LinearCrossEntropyLoss(4, 6, out_features=out_features, bias=bias, label_smoothing=0.1)
    mod.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    x = r.standard_normal((5, 4)).astype(np.float32)
    t = r.integers(0, 6, (5,) + out_features)
    t.flat[0] = -100
    want = ref(torch.tensor(x, requires_grad=True), torch.tensor(t))
    xt = tj.tensor(x, requires_grad=True)
    got = mod(xt, tj.tensor(t))
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    got.backward()
    want.backward()
    np.testing.assert_allclose(mod.linear.weight.grad.numpy(), ref.linear.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
    f = tj.compile(lambda x, w, t: tj.nn.functional.linear_cross_entropy(x, w, t, reduction="sum"), fullgraph=True)
    w = r.standard_normal((6, 4)).astype(np.float32)
    np.testing.assert_allclose(float(f(tj.tensor(x), tj.tensor(w), tj.tensor(t[:, 0] if out_features else t))),
                               float(torch.nn.functional.linear_cross_entropy(
                                   torch.tensor(x), torch.tensor(w), torch.tensor(t[:, 0] if out_features else t),
                                   reduction="sum")), rtol=1e-5)
    with pytest.raises(ShapeError, match="linear_bias"):
        tj.nn.functional.linear_cross_entropy(tj.tensor(x), tj.tensor(w), tj.tensor(t), linear_bias=tj.ones(5))
