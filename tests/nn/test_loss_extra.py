"""Loss/distance modules against PyTorch's (values and input gradients for each option set)."""
import numpy as np
import pytest

import tracejit as tj
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
