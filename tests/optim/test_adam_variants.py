"""Adamax, NAdam, RAdam, ASGD and Rprop: eight steps on the same parameters and loss give
PyTorch's parameters (float64)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

CASES = [("Adamax", dict(lr=0.05, weight_decay=0.01)), ("NAdam", dict(lr=0.05, weight_decay=0.01)),
         ("NAdam", dict(lr=0.05, weight_decay=0.01, decoupled_weight_decay=True)),
         ("RAdam", dict(lr=0.05)), ("RAdam", dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)),
         ("ASGD", dict(lr=0.05, t0=3)), ("Rprop", dict(lr=0.05)), ("Adamax", dict(lr=0.05, maximize=True))]


@pytest.mark.parametrize("name, kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_steps_match_torch(name, kw):
    x0 = np.random.default_rng(0).standard_normal((3, 4))
    out = []
    for lib in (torch, tj):
        p = lib.tensor(x0.copy(), requires_grad=True)
        opt = getattr(lib.optim, name)([p], **kw)
        for _ in range(8):
            opt.zero_grad()
            (((p - 0.3) ** 3).sum() + (p * p).sum()).backward()
            opt.step()
        out.append(p.detach().numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-8, atol=1e-9)

