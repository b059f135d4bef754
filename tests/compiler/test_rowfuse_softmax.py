"""Row fusion into softmax's row kernel (compiler/rowfuse.py, codegen_rows.py): the scale
and additive mask a program writes before a softmax (``softmax(q @ k.T * c + mask)``)
are computed per row inside softmax's kernel, not by a fused group writing the scores
back to memory first.

Each program is checked against eager and the IR interpreter (values and gradients,
`assert_compiled_matches`), one against PyTorch, and its forward plan for the row kernel.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from tracejit.compiler.rowfuse import RowGroup
from tracejit.testing import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


def _causal(L, S, dtype=np.float32):
    return tj.tensor(np.where(np.tril(np.ones((L, S))) > 0, 0.0, -np.inf).astype(dtype))


def _fwd_rows(cf):
    fwd = training_variant(cf)[0]
    return [it for it in fwd.items if isinstance(it, RowGroup)], fwd


def scaled_masked(x, m):
    return F.softmax(x * 0.125 + m, dim=-1)


MASKS = {
    "causal (L, S)": lambda: _causal(5, 7),
    "key padding (N, 1, 1, S)": lambda: T(2, 1, 1, 7, seed=4, rg=False),
    "full shape": lambda: T(2, 3, 5, 7, seed=5, rg=False),
    "learned (L, S)": lambda: T(5, 7, seed=6),
    "per-row (N, H, L, 1) stays a group": lambda: T(2, 3, 5, 1, seed=7, rg=False),
}


@pytest.mark.parametrize("mask", list(MASKS))
def test_scale_and_mask_run_in_softmax_row_kernel(mask):
    m = MASKS[mask]()
    cf = assert_compiled_matches(scaled_masked, T(2, 3, 5, 7, seed=1), m, rtol=2e-5, atol=2e-6)
    rows, fwd = _fwd_rows(cf)
    if "stays a group" in mask:
        # an operand constant along the row is none of the roles a row kernel reads
        assert not rows and any(isinstance(it, Group) for it in fwd.items), fwd.describe()
        return
    (rg,) = rows
    assert rg.describe() == "mul+add -> softmax", fwd.describe()
    assert not any(isinstance(it, Group) for it in fwd.items), fwd.describe()
    role = {"causal (L, S)": "bcast", "key padding (N, 1, 1, S)": "bcast", "full shape": "rows",
            "learned (L, S)": "bcast"}[mask]
    assert rg.roles[rg.inputs[1]] == role


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


def test_masked_fill_and_scale_before_softmax():
    # the minGPT form: scores scaled, then masked_fill(-inf) with a bool (L, S) mask
    keep = tj.tensor(np.tril(np.ones((5, 7))) > 0)

    def f(x, keep):
        return F.softmax((x * 0.125).masked_fill(~keep, float("-inf")), dim=-1)
    cf = assert_compiled_matches(f, T(2, 3, 5, 7, seed=3), keep, rtol=2e-5, atol=2e-6)
    rows, fwd = _fwd_rows(cf)
    assert len(rows) == 1 and rows[0].eqn.prim.name == "softmax", fwd.describe()


def test_softmax_over_an_inner_dim_stays_a_step():
    def f(x):
        return F.softmax(x * 2.0, dim=1)
    cf = assert_compiled_matches(f, T(4, 5, 6, seed=2), rtol=2e-5, atol=2e-6)
    rows, fwd = _fwd_rows(cf)
    assert not rows and "softmax" in [getattr(it, "prim", None) and it.prim.name for it in fwd.items]


def test_parallel_variant_above_the_parallel_threshold(monkeypatch):
    # row kernels made parallel from PARALLEL_MIN (by default from ROW_PARALLEL_MIN)
    from tracejit.compiler import codegen_rows
    from tracejit.threads import PARALLEL_MIN
    monkeypatch.setattr(codegen_rows, "ROW_PARALLEL_MIN", 0)
    shape = (4, 2, 48, 64)
    assert np.prod(shape) >= PARALLEL_MIN
    cf = assert_compiled_matches(scaled_masked, T(*shape, seed=8), _causal(48, 64), rtol=2e-5, atol=2e-6)
    (rg,), fwd = _fwd_rows(cf)
    kern = [k for k in fwd.kernels if getattr(k, "group", None) is rg][0]
    assert list(kern.variants) == [((), True)]
    assert "claim(next_chunk)" in kern.sources[((), True)]


def test_dynamic_batch_reuses_the_kernel_and_mask_rows():
    # a symbolic batch: the causal mask's row index is built from the call's sizes
    cf = tj.trace(scaled_masked, dynamic=True)
    m = _causal(5, 7)
    for n in (2, 4, 3):
        assert_compiled_matches(scaled_masked, T(n, 3, 5, 7, seed=n), m, compiled=cf, rtol=2e-5,
                                atol=2e-6, interpreter=False)
    assert len(cf._entries) == 1
    (rg,), fwd = _fwd_rows(cf)
    assert not isinstance(rg.rows_shape[0], int) and rg.roles[rg.inputs[1]] == "bcast"
