"""Compiled plans schedule softmax and its backward as their rows forms
(compiler/rowinline.py): the scale and additive mask a program writes before a softmax
(``softmax(q @ k.T * c + mask)``) are computed per row in the softmax's rows group, and
the backward's incoming gradient in its backward's, not by a group writing the scores
back to memory first.

Each program is checked against eager and the IR interpreter (values and gradients,
`assert_compiled_matches`), one against PyTorch, and its plans for the rows groups.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from tracejit.testing import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


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


def test_parallel_variant_above_the_parallel_threshold():
    from tracejit.threads import PARALLEL_MIN
    shape = (4, 2, 48, 64)
    assert np.prod(shape) >= PARALLEL_MIN
    cf = assert_compiled_matches(scaled_masked, T(*shape, seed=8), _causal(48, 64), rtol=2e-5, atol=2e-6)
    fwd = training_variant(cf)[0]
    (rg,) = _rows_groups(fwd)
    kern = [k for k in fwd.kernels if getattr(k, "group", None) is rg][0]
    assert [v for v in kern.variants if v[1]], kern.variants
    assert "prange" in kern.sources[next(v for v in kern.variants if v[1])]


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
