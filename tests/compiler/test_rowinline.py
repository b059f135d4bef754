"""Compiled plans schedule softmax, its backward and LayerNorm as their rows forms
(compiler/rowinline.py): the scale and additive mask a program writes before a softmax
(``softmax(q @ k.T * c + mask)``) are computed per row in the softmax's rows group, and
the backward's incoming gradient in its backward's, not by a group writing the scores
back to memory first; a bias add or residual before a LayerNorm and a GELU after it join
its rows group.

Each program is checked against eager and the IR interpreter (values and gradients,
`assert_compiled_matches`), one against PyTorch, and its plans for the rows groups.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from differential import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _causal(L, S, dtype=np.float32):
    return tj.tensor(np.where(np.tril(np.ones((L, S))) > 0, 0.0, -np.inf).astype(dtype))


def _rows_groups(plan):
    return [it for it in plan.items if isinstance(it, Group) and it.rows]


def _ops(g):
    return sorted(e.prim.name for e in g.eqns + g.rows)


def scaled_masked(x, m):
    return F.softmax(x * 0.125 + m, dim=-1)


MASKS = {
    "causal (L, S)": lambda: _causal(5, 7),
    "key padding (N, 1, 1, S)": lambda: T(2, 1, 1, 7, seed=4, rg=False),
    "full shape": lambda: T(2, 3, 5, 7, seed=5, rg=False),
    "learned (L, S)": lambda: T(5, 7, seed=6),
    "per-row (N, H, L, 1)": lambda: T(2, 3, 5, 1, seed=7, rg=False),
}


@pytest.mark.parametrize("mask", list(MASKS))
def test_scale_and_mask_run_in_softmax_rows_group(mask):
    m = MASKS[mask]()
    cf = assert_compiled_matches(scaled_masked, T(2, 3, 5, 7, seed=1), m, rtol=2e-5, atol=2e-6)
    fwd, bwd = training_variant(cf)[:2]
    (rg,) = _rows_groups(fwd)
    assert _ops(rg) == ["add", "amax", "div", "exp", "mul", "sub", "sum"], fwd.describe()
    assert len(fwd.items) == 1, fwd.describe()          # nothing but the one kernel
    assert not any(getattr(it, "prim", None) is not None and it.prim.name.startswith("softmax")
                   for it in fwd.items + bwd.items)
    # the backward y * (g - sum(g * y)) (and the scale) is one rows group too
    assert any({"mul", "sub", "sum"} <= set(_ops(g)) for g in _rows_groups(bwd)), bwd.describe()


def test_fused_softmax_is_eagers_bitwise_and_matches_torch():
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    x, m = T(2, 3, 5, 7, seed=1), _causal(5, 7)
    cf = tj.trace(scaled_masked)
    got = cf(x, m)
    np.testing.assert_array_equal(got.detach().numpy(), scaled_masked(x, m).detach().numpy())
    g = np.random.default_rng(2).standard_normal((2, 3, 5, 7)).astype(np.float32)
    (got * tj.tensor(g)).sum().backward()
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    ty = torch.softmax(tx * 0.125 + torch.tensor(m.numpy()), -1)
    (ty * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_all_masked_rows_give_nan_as_torch():
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    m = np.zeros((5, 7), np.float32)
    m[2] = -np.inf
    x = T(2, 3, 5, 7, seed=9, rg=False)
    with np.errstate(invalid="ignore"):
        got = tj.trace(scaled_masked)(x, tj.tensor(m)).numpy()
    want = torch.softmax(torch.tensor(x.numpy()) * 0.125 + torch.tensor(m), -1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[:, :, 2]).all()
    np.testing.assert_allclose(got[:, :, [0, 1, 3, 4]], want[:, :, [0, 1, 3, 4]], rtol=1e-5, atol=1e-7)


def test_masked_fill_and_scale_before_softmax():
    # the minGPT form: scores scaled, then masked_fill(-inf) with a bool (L, S) mask
    keep = tj.tensor(np.tril(np.ones((5, 7))) > 0)

    def f(x, keep):
        return F.softmax((x * 0.125).masked_fill(~keep, float("-inf")), dim=-1)
    cf = assert_compiled_matches(f, T(2, 3, 5, 7, seed=3), keep, rtol=2e-5, atol=2e-6)
    fwd = training_variant(cf)[0]
    (rg,) = _rows_groups(fwd)
    assert {"mul", "where", "amax", "sum", "exp"} <= set(_ops(rg)), fwd.describe()


def test_softmax_over_an_inner_dim_stays_a_step():
    def f(x):
        return F.softmax(x * 2.0, dim=1)
    cf = assert_compiled_matches(f, T(4, 5, 6, seed=2), rtol=2e-5, atol=2e-6)
    fwd = training_variant(cf)[0]
    assert not _rows_groups(fwd) and "softmax" in [getattr(it, "prim", None) and it.prim.name
                                                   for it in fwd.items]


def test_parallel_variant_from_the_groups_work(monkeypatch):
    # a plan's rows group runs parallel from its work, elements x passes, as an eager rows
    # kernel does (codegen_cpu_rows.parallel_elements_min): here below it, then (the rule
    # made to say parallel from 0) above
    from tracejit.compiler import codegen_cpu_rows
    shape = (4, 2, 48, 64)

    def variants():
        cf = assert_compiled_matches(scaled_masked, T(*shape, seed=8), _causal(48, 64), rtol=2e-5, atol=2e-6)
        fwd = training_variant(cf)[0]
        (rg,) = _rows_groups(fwd)
        kern = [k for k in fwd.kernels if getattr(k, "group", None) is rg][0]
        return kern, [v for v in kern.variants if v[1]]
    kern, parallel = variants()
    assert np.prod(shape) < codegen_cpu_rows.parallel_elements_min(kern.nest(next(iter(kern.variants))[0]))
    assert not parallel, kern.variants
    monkeypatch.setattr(codegen_cpu_rows, "parallel_elements_min", lambda nest, threads=0: 0)
    kern, parallel = variants()
    assert parallel and len(kern.variants) == 1, kern.variants


def test_dynamic_batch_reuses_the_kernel():
    # a symbolic batch: the rows group's row count comes from the call's sizes
    cf = tj.trace(scaled_masked, dynamic=True)
    m = _causal(5, 7)
    for n in (2, 4, 3):
        assert_compiled_matches(scaled_masked, T(n, 3, 5, 7, seed=n), m, compiled=cf, rtol=2e-5,
                                atol=2e-6, interpreter=False)
    assert len(cf._entries) == 1
    fwd = training_variant(cf)[0]
    (rg,) = _rows_groups(fwd)
    assert not isinstance(rg.shape[0], int)


@pytest.mark.parametrize("dim,keepdim", [(-1, True), (1, False)])
def test_logsumexp_gradient_fuses_and_matches_torch(dim, keepdim):
    # g * exp(x - out) joins the group making x's gradient: no logsumexp_backward step
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    xv = np.random.default_rng(3).standard_normal((3, 4, 6)).astype(np.float32)

    def f(x):
        return (tj.logsumexp(x * 2.0, dim, keepdim=keepdim) * 0.5).sum()
    cf = assert_compiled_matches(f, tj.tensor(xv, requires_grad=True), rtol=2e-5, atol=2e-6)
    plans = [p for p in training_variant(cf)[:2] if p is not None]   # (one joint plan here)
    steps = [it.prim.name for p in plans for it in p.items if getattr(it, "prim", None) is not None]
    assert "logsumexp_backward" not in steps, [p.describe() for p in plans]
    x = tj.tensor(xv, requires_grad=True)
    cf(x).backward()
    tx = torch.tensor(xv, requires_grad=True)
    (torch.logsumexp(tx * 2.0, dim, keepdim=keepdim) * 0.5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------- LayerNorm
def mlp_layer(x, b, w, c):
    """Linear's bias add, LayerNorm, GELU: the MLP workload's hidden layer after its GEMM."""
    return F.gelu(F.layer_norm(x + b, (x.shape[-1],), w, c), approximate="tanh")


def test_bias_layer_norm_gelu_is_one_rows_group():
    x, b, w, c = T(6, 5, 32, seed=1), T(32, seed=2), T(32, seed=3), T(32, seed=4)
    cf = assert_compiled_matches(mlp_layer, x, b, w, c, rtol=2e-5, atol=2e-6)
    fwd = training_variant(cf)[0]
    (rg,) = _rows_groups(fwd)
    assert {"add", "sum", "rsqrt", "gelu"} <= set(_ops(rg)), fwd.describe()
    assert not any(getattr(it, "prim", None) is not None and it.prim.name == "layer_norm"
                   for it in fwd.items), fwd.describe()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 7, 33])
def test_layer_norm_rows_group_is_eagers_bitwise_and_matches_torch(dtype, k):
    # eager runs the kernel rendered from the same rows form over the (M, K) view
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    r = np.random.default_rng(k)
    xv, wv, bv = ((r.standard_normal(s) * 2 + 1).astype(dtype) for s in ((4, 3, k), (k,), (k,)))

    def f(x, w, b):
        return F.layer_norm(x, (k,), w, b) * 2.0
    x, w, b = (tj.tensor(a) for a in (xv, wv, bv))
    got = tj.trace(f)(x, w, b).numpy()
    np.testing.assert_array_equal(got, f(x, w, b).numpy())
    want = (torch.nn.functional.layer_norm(torch.tensor(xv), (k,), torch.tensor(wv), torch.tensor(bv))
            * 2.0).numpy()
    tol = 2e-5 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_layer_norm_of_a_transposed_input():
    def f(x, w):
        return F.layer_norm(x.transpose(0, 1), (6,), w) + 1.0
    assert_compiled_matches(f, T(5, 4, 6, seed=5), T(6, seed=6), rtol=2e-5, atol=2e-6)


def test_layer_norm_over_two_dims_stays_a_step():
    def f(x, w):
        return F.gelu(F.layer_norm(x - 1.0, (5, 6), w))
    cf = assert_compiled_matches(f, T(3, 5, 6, seed=7, dtype=np.float64), T(5, 6, seed=8, dtype=np.float64))
    fwd = training_variant(cf)[0]
    assert not _rows_groups(fwd) and "layer_norm" in fwd.describe(), fwd.describe()


def test_residual_sum_needed_later_is_written_by_the_rows_group():
    # the Transformer's norm(x + sublayer(x)): the residual stream is read again after the
    # LayerNorm (here by a GEMM), so the rows group writes it as well as its result
    def f(x, y, w, c, m):
        h = x + y
        z = F.layer_norm(h, (32,), w, c)
        return F.relu(z) + h, h @ m
    args = T(4, 8, 32, seed=1), T(4, 8, 32, seed=2), T(32, seed=3), T(32, seed=4), T(32, 5, seed=5)
    cf = assert_compiled_matches(f, *args, rtol=2e-5, atol=2e-5)
    (rg,) = _rows_groups(training_variant(cf)[0])
    h = next(e.out for e in rg.eqns if e.prim.name == "add" and e.inputs[0].aval.shape == (4, 8, 32))
    assert h in rg.outputs

    def g(x, y, w, c):
        h = x + y
        return F.relu(F.layer_norm(h, (32,), w, c)) + h
    cf = assert_compiled_matches(g, *args[:4], rtol=2e-5, atol=2e-5)
    (rg,) = _rows_groups(training_variant(cf)[0])
    assert h not in rg.outputs and len(rg.outputs) == 2   # the result, and LayerNorm's (saved)


def test_layer_norm_output_read_by_a_product_and_an_epilogue():
    # tanh(y) + y @ m: the rows group writes y for the GEMM; tanh and the add run after it
    def f(x, b, m):
        y = F.layer_norm(x + b, (16,))
        return tj.tanh(y) + y @ m
    cf = assert_compiled_matches(f, T(10, 16, seed=1), T(16, seed=2), T(16, 16, seed=3), rtol=2e-5, atol=2e-5)
    (rg,) = _rows_groups(training_variant(cf)[0])
    assert "add" in _ops(rg)


def test_positional_add_broadcast_over_the_batch_joins_layer_norm():
    # x + pos, pos (T, E) over (N, T, E) rows: read in the rows group, no group of its own
    def f(x, pos, w, b):
        return F.layer_norm(x + pos, (12,), w, b)
    cf = assert_compiled_matches(f, T(4, 5, 12, seed=1), T(5, 12, seed=2), T(12, seed=3), T(12, seed=4),
                                 rtol=2e-5, atol=2e-5)
    fwd = training_variant(cf)[0]
    (rg,) = _rows_groups(fwd)
    assert len(fwd.items) == 1 and "add" in _ops(rg), fwd.describe()


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_without_affine_parts(affine):
    def f(x, s, *wb):
        w = wb[0] if affine[0] else None
        c = wb[-1] if affine[1] else None
        return tj.tanh(F.layer_norm(x * s, (16,), w, c)) * 2.0 + s
    x, s = T(9, 16, seed=1), T(seed=2)           # s: one value, read once
    wb = [T(16, seed=3 + i) for i, a in enumerate(affine) if a]
    cf = assert_compiled_matches(f, x, s, *wb, rtol=2e-5, atol=2e-5)
    (rg,) = _rows_groups(training_variant(cf)[0])
    assert {"mul", "tanh"} <= set(_ops(rg))


def test_layer_norm_of_token_rows_whose_gradient_is_summed_on_a_view():
    # the encoder layer's shape: LayerNorm on (N, T, E), the next block on (tokens, E) rows;
    # its input gradient (residual + feed-forward) is added on the tokens and reshaped
    def f(x, w1, w2):
        t = F.layer_norm(x, (12,)).reshape(20, 12)
        return F.layer_norm(t + F.relu(t @ w1) @ w2, (12,))
    assert_compiled_matches(f, T(4, 5, 12, seed=1), T(12, 16, seed=2), T(16, 12, seed=3), rtol=2e-5, atol=2e-5)


def test_loss_with_its_gradients_in_one_plan():
    # a 0-d loss: forward and gradients are one plan; the bias add joins the forward's rows
    # group, which writes the sum for layer_norm_backward
    def loss(x, b, w, c, m, t):
        return ((mlp_layer(x, b, w, c) @ m - t) ** 2).mean()
    args = (T(24, 32, seed=1), T(32, seed=2), T(32, seed=3), T(32, seed=4), T(32, 8, seed=5),
            T(24, 8, seed=6, rg=False))
    cf = assert_compiled_matches(loss, *args, rtol=2e-5, atol=2e-5)
    plan = training_variant(cf)[0]
    (rg,) = _rows_groups(plan)
    assert any(e.prim.name == "add" and e.out in rg.outputs for e in rg.eqns), plan.describe()


def test_encoder_layer_against_float64():
    # norm(a + bias + residual) read by a GEMM and a residual: values and gradients of the
    # compiled program against the same function in float64 (numpy, no kernel)
    def f(a, r, b, w, c, m):
        h = F.layer_norm(a + b + r, (64,), w, c)
        return h @ m + h
    rng = np.random.default_rng(41)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((96, 64), (96, 64), (64,), (64,), (64,), (64, 64))]
    args[3] += 1
    g = rng.standard_normal((96, 64)).astype(np.float32)
    cf = tj.trace(f)
    leaves = [tj.tensor(v).requires_grad_() for v in args[:5]]
    y = cf(*leaves, tj.tensor(args[5]))
    y.backward(tj.tensor(g))
    a, r, b, w, c, m = (v.astype(np.float64) for v in args)
    x = a + b + r
    mu = x.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    xh = (x - mu) * rstd
    ref_y = (xh * w + c) @ m + xh * w + c
    dy = g.astype(np.float64) @ m.T + g
    gw = dy * w
    dx = rstd * (gw - gw.mean(1, keepdims=True) - xh * (gw * xh).mean(1, keepdims=True))
    refs = {"y": ref_y, "a": dx, "r": dx, "b": dx.sum(0), "w": (dy * xh).sum(0), "c": dy.sum(0)}
    got = {"y": y.detach().numpy()} | {k: t.grad.numpy() for k, t in zip("arbwc", leaves)}
    for k, e in refs.items():
        assert got[k].dtype == np.float32
        np.testing.assert_allclose(got[k], e, rtol=2e-5, atol=2e-6 * np.abs(e).max(), err_msg=k)
