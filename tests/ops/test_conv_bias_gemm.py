"""conv2d's bias through the GEMM (ops/conv.py layout "gemm_bias", ops/composite.py conv2d).

The "gemm_bias" columns are the "gemm" ones with a last row of ones (numba kernel and numpy
form); unfold's VJP drops that row's gradient; a convolution with a bias then has no add
over its output and no reduction for the bias gradient, and its values and gradients equal
PyTorch's (eager and compiled) and the bias-free convolution plus a broadcast bias.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.kernels import conv_kernels as K
from tracejit.ops import conv as C

GEOMETRIES = [((3, 3), (1, 1), (0, 0), (1, 1)),
              ((3, 2), (2, 1), (1, 1), (1, 2))]


@pytest.mark.parametrize("numpy_form", [False, True])
@pytest.mark.parametrize("geo", GEOMETRIES)
def test_gemm_bias_columns_are_gemm_columns_and_ones(monkeypatch, geo, numpy_form):
    if numpy_form:
        monkeypatch.setattr(K, "_im2col_native", lambda *a: None)
    x = np.random.default_rng(0).standard_normal((3, 4, 9, 8)).astype(np.float32)
    g = C.unfold(tj.tensor(x), *geo, layout="gemm").numpy()
    gb = C.unfold(tj.tensor(x), *geo, layout="gemm_bias").numpy()
    assert gb.shape == (g.shape[0] + 1, g.shape[1])
    np.testing.assert_array_equal(gb[:-1], g)
    np.testing.assert_array_equal(gb[-1], np.ones(g.shape[1], np.float32))


def test_unfold_gemm_bias_gradient_drops_the_ones_row():
    x = tj.tensor(np.random.default_rng(1).standard_normal((2, 3, 6, 7)), requires_grad=True)
    cols = C.unfold(x, (3, 3), 1, 1, 1, layout="gemm_bias")
    w = np.random.default_rng(2).standard_normal(tuple(cols.shape))
    (cols * tj.tensor(w)).sum().backward()
    ref = C.fold(tj.tensor(w[:-1]), (6, 7), (3, 3), 1, 1, 1, layout="gemm").numpy()
    np.testing.assert_array_equal(x.grad.numpy(), ref)


def test_conv_with_bias_matches_bias_free_conv_plus_bias_and_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((4, 3, 10, 9))
    w0, b0 = rng.standard_normal((5, 3, 3, 3)), rng.standard_normal(5)
    g0 = rng.standard_normal((4, 5, 8, 5))

    def grads(f, mod):
        x, w, b = (mod.tensor(a, requires_grad=True) for a in (x0, w0, b0))
        out = f(x, w, b)
        (out * mod.tensor(g0)).sum().backward()
        return [t.detach().numpy() for t in (out, x.grad, w.grad, b.grad)]

    fused = grads(lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(0, 1)), tj)
    split = grads(lambda x, w, b: F.conv2d(x, w, None, stride=(1, 2), padding=(0, 1))
                  + b.reshape(1, 5, 1, 1), tj)
    ref = grads(lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=(1, 2), padding=(0, 1)),
                torch)
    for a, s, r in zip(fused, split, ref):
        np.testing.assert_allclose(a, s, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fused[3], g0.sum(axis=(0, 2, 3)), rtol=1e-12)


def test_compiled_conv_bias_has_no_add_and_no_sum_and_matches_torch():
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    conv = tj.nn.Conv2d(2, 4, 3)
    tconv = torch.nn.Conv2d(2, 4, 3)
    tconv.load_state_dict({k: torch.tensor(v.numpy()) for k, v in conv.state_dict().items()})
    x0 = np.random.default_rng(4).standard_normal((3, 2, 7, 7)).astype(np.float32)
    f = tj.script(lambda x: (conv(x) ** 2).sum())
    for _ in range(2):
        conv.zero_grad()
        f(tj.tensor(x0)).backward()
    tconv.zero_grad()
    (tconv(torch.tensor(x0)) ** 2).sum().backward()
    np.testing.assert_allclose(conv.weight.grad.numpy(), tconv.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(conv.bias.grad.numpy(), tconv.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
    g = f.entries[0].opt_graph
    names = [e.prim.name for e in g.eqns]
    assert "add" not in names and "concat" in names, names     # the bias joins the weight
    unf = next(e for e in g.eqns if e.prim.name == "unfold")
    assert unf.params.get("layout") == "gemm_bias"


def test_mixed_dtype_bias_keeps_the_add():
    x = tj.tensor(np.ones((1, 1, 3, 3), np.float32))
    w = tj.tensor(np.ones((1, 1, 2, 2), np.float32))
    out = F.conv2d(x, w, tj.tensor(np.array([0.5])))   # float64 bias: not the weight's dtype
    np.testing.assert_allclose(out.numpy(), np.full((1, 1, 2, 2), 4.5))
