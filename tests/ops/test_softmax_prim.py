"""Eager softmax and LayerNorm primitives (ops/softmax_prim.py, ops/layer_norm_prim.py)
against the composites they replace eagerly: the same values (softmax: bitwise), edge
cases the composite handled, and the composites still used when traced."""
import numpy as np

import tracejit as tj
from tracejit.ops import composite


def _composite_softmax(x, dim):
    e = tj.exp(x - tj.amax(x, dim, keepdim=True))
    return e / tj.sum(e, dim, keepdim=True)


def test_softmax_is_bitwise_the_composite():
    x = tj.tensor(np.random.default_rng(0).standard_normal((3, 7, 5)).astype(np.float32))
    for dim in (0, 1, 2):
        got = tj.softmax(x, dim)
        assert got.grad_fn is None and np.array_equal(got.numpy(), _composite_softmax(x, dim).numpy())


def test_softmax_edge_cases_behave_as_before():
    x = tj.tensor(1.5, requires_grad=True)          # 0-d: the composite's path
    y = tj.softmax(x, 0)
    y.backward()
    assert y.item() == 1.0 and x.grad.item() == 0.0
    with np.errstate(invalid="ignore"):
        rows = tj.softmax(tj.tensor([[1.0, -np.inf], [-np.inf, -np.inf]]), -1).numpy()
    assert rows[0].tolist() == [1.0, 0.0] and np.isnan(rows[1]).all()     # as PyTorch
    assert tj.softmax(tj.zeros(2, 0), -1).shape == (2, 0)


def test_traced_softmax_and_layer_norm_keep_the_composites():
    from tracejit.jit.tracer import trace_graph
    from tracejit.ops.registry import Aval

    def f(x, w):
        return tj.softmax(x, -1) + composite.layer_norm(x, (4,), w, None)
    ctx, out = trace_graph(f, [Aval((3, 4), tj.float32), Aval((4,), tj.float32)])
    names = {e.prim.name for e in ctx.eqns}
    assert "exp" in names and "rsqrt" in names          # the composites' ops, fusable
    assert "softmax" not in names and "layer_norm" not in names
    traced = tj.trace(f, compiler="interpret")
    x, w = tj.randn(3, 4), tj.randn(4)
    np.testing.assert_allclose(traced(x, w).numpy(), f(x, w).numpy(), rtol=1e-5, atol=1e-6)


def test_layer_norm_matches_the_composite_formula():
    r = np.random.default_rng(1)
    xv, wv, bv = r.standard_normal((6, 3, 8)), r.standard_normal(8), r.standard_normal(8)
    x, w, b = (tj.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    y = tj.nn.functional.layer_norm(x, (8,), w, b)
    mu = xv.mean(-1, keepdims=True)
    ref = (xv - mu) / np.sqrt(((xv - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * wv + bv
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    g = r.standard_normal(y.shape)
    (y * tj.tensor(g)).sum().backward()
    xc, wc, bc = (tj.tensor(v, requires_grad=True) for v in (xv, wv, bv))
    d = xc - tj.mean(xc, -1, keepdim=True)
    yc = d * tj.rsqrt(tj.mean(d * d, -1, keepdim=True) + 1e-5) * wc + bc
    (yc * tj.tensor(g)).sum().backward()
    for a, c in ((x, xc), (w, wc), (b, bc)):
        np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=1e-10, atol=1e-12)
