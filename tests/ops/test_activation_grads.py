"""Composite activations (ops/activation.py) against PyTorch: values, first and second
derivatives, at the points where the branches meet."""
import math

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_X = [0.0, -0.0, -1.0, 1.0, -3.5, -math.inf, math.inf, math.nan]


@pytest.mark.parametrize("name, kw", [("elu", {}), ("elu", {"alpha": 2.0}), ("selu", {}),
                                      ("celu", {"alpha": 0.5})])
def test_elu_family_derivatives_match_pytorch(name, kw):
    got = {}
    for lib in (torch, tj):
        x = lib.tensor(_X, requires_grad=True)
        y = getattr(lib.nn.functional, name)(x, **kw)
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        got[lib] = [np.array(t.detach().tolist()) for t in (y, g, gg)]
    for mine, want in zip(got[tj], got[torch]):   # (at 0: alpha, then 0; at a NaN: 1, then 0)
        np.testing.assert_allclose(mine, want, rtol=1e-4, equal_nan=True)
