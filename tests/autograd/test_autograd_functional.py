"""torch.autograd.functional's jacobian, hessian, vjp, jvp, hvp and vhp against PyTorch
(float64): single tensors and tuples, create_graph, strict mode and independent outputs."""
import numpy as np
import pytest

import tracejit as tj
from tracejit.autograd import functional as AF

torch = pytest.importorskip("torch", reason="compares with PyTorch")
TAF = torch.autograd.functional
R = np.random.default_rng(4)
A, B, V3, V4 = R.standard_normal((4, 3)), R.standard_normal(3), R.standard_normal(3), R.standard_normal((4, 2))


def _np(x):
    if isinstance(x, tuple):
        return tuple(_np(v) for v in x)
    return x.detach().numpy()


def _same(mine, ref):
    if isinstance(ref, tuple):
        assert isinstance(mine, tuple) and len(mine) == len(ref)
        for a, b in zip(mine, ref):
            _same(a, b)
        return
    np.testing.assert_allclose(_np(mine), _np(ref), rtol=1e-10, atol=1e-12)


def _both(fn):
    """fn(lib) -> result, with lib the library (its tensor constructor is lib.tensor)."""
    _same(fn(tj), fn(torch))


def _af(lib):
    return AF if lib is tj else TAF


def test_jacobian_of_one_and_of_tuples():
    _both(lambda L: _af(L).jacobian(lambda x: x.tanh() @ L.ones(3, 2, dtype=L.float64), L.tensor(A)))
    _both(lambda L: _af(L).jacobian(lambda x, y: (x * y, (x @ y).exp()), (L.tensor(A), L.tensor(B))))
    _both(lambda L: _af(L).jacobian(lambda x, y: x.sum() * 2, (L.tensor(A), L.tensor(B))))   # y unused: zeros


def test_hessian_of_one_and_of_tuples():
    _both(lambda L: _af(L).hessian(lambda x: (x.sin() ** 2).sum() + x[0] * x[2], L.tensor(B)))
    _both(lambda L: _af(L).hessian(lambda x, y: (x @ y).pow(2).sum(), (L.tensor(A), L.tensor(B))))


def test_vjp_jvp_hvp_vhp():
    _both(lambda L: _af(L).vjp(lambda x: x ** 2 * x.sum(), L.tensor(B), L.tensor(V3)))
    _both(lambda L: _af(L).vjp(lambda x: (x ** 2).sum(), L.tensor(B)))                   # v None: scalar
    _both(lambda L: _af(L).jvp(lambda x: (x.exp() @ L.ones(3, 2, dtype=L.float64)), L.tensor(A), L.tensor(A)))
    _both(lambda L: _af(L).jvp(lambda x, y: (x * y, x.sum() + y), (L.tensor(B), L.tensor(V3)),
                               (L.tensor(V3), L.tensor(B))))
    _both(lambda L: _af(L).hvp(lambda x: (x ** 3).sum() * x[1], L.tensor(B), L.tensor(V3)))
    _both(lambda L: _af(L).vhp(lambda x: (x ** 3).sum() * x[1], L.tensor(B), L.tensor(V3)))


def test_create_graph_keeps_the_result_differentiable():
    for L in (tj, torch):
        x = L.tensor(B, requires_grad=True)
        _, g = _af(L).vjp(lambda t: (t ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        if L is tj:
            mine = x.grad.numpy()
        else:
            ref = x.grad.numpy()
    np.testing.assert_allclose(mine, ref, rtol=1e-12)
    out, _ = AF.vjp(lambda t: (t ** 3).sum(), tj.tensor(B, requires_grad=True))
    assert not out.requires_grad


def test_strict_mode_and_bad_arguments_name_the_culprit():
    with pytest.raises(RuntimeError, match="independent of input 1"):
        AF.jacobian(lambda x, y: x * 2, (tj.tensor(B), tj.tensor(B)), strict=True)
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        AF.jacobian(lambda x: x, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="single element"):
        AF.hessian(lambda x: x * 2, tj.tensor(B))
    with pytest.raises(RuntimeError, match="can only be None"):
        AF.vjp(lambda x: x * 2, tj.tensor(B))
    with pytest.raises(RuntimeError, match="shape"):
        AF.jvp(lambda x: x * 2, tj.tensor(B), tj.tensor(V4))
