"""Row fusion (compiler/rowfuse.py, codegen_rows.py): elementwise groups around LayerNorm's
backward run inside its row kernel (the forward is its rows form's rows group:
compiler/rowinline.py, tests/compiler/test_rowinline.py).

Every program is checked against eager and the IR interpreter (values and gradients,
`assert_compiled_matches`), and its plans for the fusion that must (or must not) happen:
one row kernel where there were a row step and fused groups.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from tracejit.compiler.rowfuse import RowGroup, role
from tracejit.ops.layer_norm_prim import LAYER_NORM_BACKWARD
from tracejit.ops.softmax_prim import SOFTMAX
from tracejit.testing import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


_train = training_variant


def _kinds(plan):
    out = []
    for it in plan.items:
        if isinstance(it, RowGroup):
            out.append("row:" + it.describe())
        elif isinstance(it, Group):
            out.append("group:" + ",".join(e.prim.name for e in it.eqns))
        else:
            out.append(it.prim.name)
    return out


def _rows(plan):
    return [it for it in plan.items if isinstance(it, RowGroup)]


def _rows_groups(plan):
    return [it for it in plan.items if isinstance(it, Group) and it.rows]


def mlp_layer(x, b, w, c):
    """Linear's bias add, LayerNorm, GELU: the MLP workload's hidden layer after its GEMM."""
    return F.gelu(F.layer_norm(x + b, (x.shape[-1],), w, c), approximate="tanh")


def test_bias_layer_norm_gelu_backward_is_one_row_kernel():
    x, b, w, c = T(37, 48, seed=1), T(48, seed=2), T(48, seed=3), T(48, seed=4)
    cf = assert_compiled_matches(mlp_layer, x, b, w, c, rtol=2e-5, atol=2e-5)
    fwd, bwd, _ = _train(cf)
    # forward: bias add, LayerNorm and GELU in one rows group, which writes the GELU and
    # LayerNorm's output (saved for the backward: compiler/saving.py)
    (rg,) = _rows_groups(fwd)
    assert len(fwd.items) == 1 and len(rg.outputs) == 2, fwd.describe()
    # backward: the recomputed sum and gelu_backward(g) * ... feed layer_norm_backward
    # from the row buffers, and b's gradient (dx summed over the rows) is summed by the same
    # kernel; no group and no sum step is left
    kinds = _kinds(bwd)
    assert kinds[0] == "row:add -> gelu_backward -> layer_norm_backward -> sum over rows", bwd.describe()
    assert not any(k.startswith("group:") for k in kinds), kinds
    assert "layer_norm_backward" not in kinds and "sum" not in kinds


def test_results_are_those_of_the_unfused_plan(monkeypatch):
    # The kernel computes LayerNorm with the row kernel's own text and the chains with the
    # scalar rules every fused kernel uses: the same arithmetic as the plan without row
    # fusion, so the forward is bitwise the same.
    x, b, w, c = T(64, 96, seed=5), T(96, seed=6), T(96, seed=7), T(96, seed=8)
    g = np.random.default_rng(3).standard_normal((64, 96)).astype(np.float32)
    got = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("TRACEJIT_ROW_FUSION", flag)
        cf = tj.trace(mlp_layer)
        leaves = [t.detach().clone().requires_grad_() for t in (x, b, w, c)]
        y = cf(*leaves)
        y.backward(tj.tensor(g))
        got[flag] = [y.detach().numpy()] + [t.grad.numpy() for t in leaves]
        assert bool(_rows(_train(cf)[1])) == (flag == "1")
    np.testing.assert_array_equal(got["0"][0], got["1"][0])
    for a, e in zip(got["1"][1:], got["0"][1:]):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_without_affine_parts(affine):
    def f(x, s, *wb):
        w = wb[0] if affine[0] else None
        c = wb[-1] if affine[1] else None
        return tj.tanh(F.layer_norm(x * s, (16,), w, c)) * 2.0 + s
    x, s = T(9, 16, seed=1), T(seed=2)           # s: one value, read once
    wb = [T(16, seed=3 + i) for i, a in enumerate(affine) if a]
    cf = assert_compiled_matches(f, x, s, *wb, rtol=2e-5, atol=2e-5)
    fwd, bwd, _ = _train(cf)
    (rg,) = _rows(bwd)
    assert rg.x_pro is not None and rg.g_pro is not None and "scalar" in rg.roles.values(), rg.roles


def test_layer_norm_over_two_dims_float64():
    def f(x, b, w):
        return F.gelu(F.layer_norm(x - b, (5, 6), w), approximate="none")
    args = T(3, 4, 5, 6, seed=1, dtype=np.float64), T(6, seed=2, dtype=np.float64), \
        T(5, 6, seed=3, dtype=np.float64)
    cf = assert_compiled_matches(f, *args, rtol=1e-10, atol=1e-10)
    fwd, bwd, _ = _train(cf)
    (rg,) = _rows(fwd)
    assert rg.roles[rg.inputs[1]] == "col" and rg.epi is not None
    assert any(isinstance(it, RowGroup) for it in bwd.items), bwd.describe()


def test_operands_a_row_kernel_cannot_read_keep_their_group():
    # a per-row operand (M, 1) is not one of the roles: the epilogue stays a fused group
    def f(x, r):
        return F.layer_norm(x, (12,)) * r
    cf = assert_compiled_matches(f, T(7, 12, seed=1), T(7, 1, seed=2), rtol=2e-5, atol=2e-5)
    fwd, _, _ = _train(cf)
    assert not _rows(fwd) and any(isinstance(it, Group) for it in fwd.items), fwd.describe()


def test_roles():
    from tracejit import dtypes
    from tracejit.jit.ir import Var
    from tracejit.ops.registry import Aval

    def v(*s):
        return Var(Aval(s, dtypes.as_dtype("float32")))
    shape = (4, 5, 6)
    assert role(v(4, 5, 6), shape, 1) == "rows"
    assert role(v(6), shape, 1) == role(v(1, 1, 6), shape, 1) == "col"
    assert role(v(), shape, 1) == role(v(1, 1), shape, 1) == "scalar"
    assert role(v(5, 6), shape, 2) == "col"
    # whole along the row, broadcast along some leading dims: an attention mask
    assert role(v(5, 6), shape, 1) == role(v(4, 1, 6), shape, 1) == "bcast"
    assert role(v(4, 5, 1), shape, 1) is None and role(v(2, 4, 5, 6), shape, 1) is None


def test_generated_source_is_readable_and_names_the_ops():
    x, b, w, c = T(8, 16, seed=1), T(16, seed=2), T(16, seed=3), T(16, seed=4)
    cf = assert_compiled_matches(mlp_layer, x, b, w, c, rtol=2e-5, atol=2e-5)
    fwd, bwd, _ = _train(cf)
    bsrc = [k for k in bwd.kernels if hasattr(k, "group") and isinstance(k.group, RowGroup)][0].spec().source
    for part in ("def pro_x(", "def pro_g(", "  # add\n", "  # gelu_backward\n", "fastmath=False"):
        assert part in bsrc, bsrc
    # the ops, not the user's lines: the source is the kernel's identity (loopnest.lower)
    assert "test_rowfuse.py" not in bsrc
    assert "row kernel: add -> gelu_backward -> layer_norm_backward" in bwd.describe()


def test_dynamic_batch_reuses_the_kernel():
    # a symbolic batch size: the sizes are the kernel's arguments, one kernel for all
    cf = tj.trace(mlp_layer, dynamic=True)
    w, b, c = T(24, seed=3), T(24, seed=2), T(24, seed=4)
    for n in (5, 11, 3):
        assert_compiled_matches(mlp_layer, T(n, 24, seed=n), b, w, c, compiled=cf, rtol=2e-5, atol=2e-5,
                                interpreter=False)
    assert len(cf._entries) == 1
    _, bwd, _ = _train(cf)
    (rg,) = _rows(bwd)
    assert not isinstance(rg.rows_shape[0], int)
    assert len([k for k in bwd.kernels if getattr(k, "group", None) is rg][0].variants) == 1


def test_parallel_variant_above_the_parallel_threshold(monkeypatch):
    # 200 x 96 = 19200 elements >= PARALLEL_MIN, with row kernels made parallel from there
    # (by default from codegen_rows.ROW_PARALLEL_MIN): the share form, chunks of rows claimed
    # from a counter by the launch's shares, each with its own row buffers and partial sums
    # of the weight/bias gradients (3 chunks of >= 64 rows: not a multiple of the row count,
    # so chunk edges fall mid-block), no prange
    from tracejit.compiler import codegen_rows
    from tracejit.threads import PARALLEL_MIN
    monkeypatch.setattr(codegen_rows, "ROW_PARALLEL_MIN", 0)
    assert 200 * 96 >= PARALLEL_MIN and codegen_rows.parallel_min() == PARALLEL_MIN
    for kern in [_layer_row_kernel(200, 96, seed=11)]:
        assert list(kern.variants) == [((), True)]
        assert isinstance(kern.variants[((), True)], codegen_rows.RowShares)
        source = kern.sources[((), True)]
        assert "claim(next_chunk)" in source and "prange" not in source


@pytest.mark.parametrize("rows", [256, 200])
def test_share_form_results_do_not_depend_on_the_share_count(monkeypatch, rows):
    # the layer's backward row kernel (share form) on 1, 2 and 3 shares: the
    # same bits (each chunk is the same work whoever claims it; the backward's partial sums
    # are folded in chunk order)
    from tracejit.compiler.cpu.runtime import sharepool
    from tracejit.compiler import codegen_rows
    monkeypatch.setattr(codegen_rows, "ROW_PARALLEL_MIN", 0)
    x, b, w, c = T(rows, 96, seed=31), T(96, seed=32), T(96, seed=33), T(96, seed=34)
    g = np.random.default_rng(35).standard_normal((rows, 96)).astype(np.float32)
    from tracejit.compiler.cpu.runtime import cshares
    pairs = []
    real = cshares.CShares.__call__
    monkeypatch.setattr(cshares.CShares, "__call__", lambda self, args: (pairs.append(1), real(self, args)))
    cf = tj.trace(mlp_layer)
    got = []
    for shares in (1, 2, 3, 1):
        monkeypatch.setattr(sharepool, "pool_threads", lambda: shares)
        leaves = [t.detach().clone().requires_grad_() for t in (x, b, w, c)]
        y = cf(*leaves)
        y.backward(tj.tensor(g))
        got.append([y.detach().numpy()] + [t.grad.numpy() for t in leaves])
    bwd = _train(cf)[1]
    assert any(isinstance(v, codegen_rows.RowShares) for v in bwd.fn.__globals__.values())
    # on two shares the kernel ran GIL-free where numpy's BLAS has a pool of two (cshares)
    assert len(pairs) == (1 if sharepool.blas_worker.find() is not None else 0)
    for other in got[1:]:
        for a, e in zip(other, got[0]):
            np.testing.assert_array_equal(a, e)


def _layer_row_kernel(rows: int, cols: int, seed: int):
    """The backward row kernel of a compiled `mlp_layer` of (rows, cols), after checking
    its values and gradients."""
    x, b, w, c = T(rows, cols, seed=seed), T(cols, seed=seed + 1), T(cols, seed=seed + 2), T(cols, seed=seed + 3)
    cf = assert_compiled_matches(mlp_layer, x, b, w, c, rtol=2e-5, atol=2e-5)
    bwd = _train(cf)[1]
    (rg,) = _rows(bwd)
    return [k for k in bwd.kernels if getattr(k, "group", None) is rg][0]


def test_backward_row_kernel_of_an_mlp_layer_in_shares():
    # An MLP layer of 256 x 1024 (above LN_BACKWARD_PARALLEL_MIN, below ROW_PARALLEL_MIN):
    # the row kernel comes right after the layer's GEMMs and gets only its share form
    from tracejit.compiler import codegen_rows
    assert codegen_rows.parallel_min(LAYER_NORM_BACKWARD) <= 256 * 1024 < codegen_rows.parallel_min(SOFTMAX)
    bwd = _layer_row_kernel(256, 1024, seed=21)
    assert list(bwd.variants) == [((), True)]


def test_loss_with_its_gradients_in_one_plan():
    # a 0-d loss: forward and gradients are one plan (executor's loss joint); the forward
    # row kernel and the backward one sit in the same plan. (Without the GEMM after the
    # layer, the GELU, the loss and its gradient form one group closed by the loss's sum,
    # which stays a group: a reduction group does not join a row kernel.)
    def loss(x, b, w, c, m, t):
        return ((mlp_layer(x, b, w, c) @ m - t) ** 2).mean()
    args = (T(24, 32, seed=1), T(32, seed=2), T(32, seed=3), T(32, seed=4), T(32, 8, seed=5),
            T(24, 8, seed=6, rg=False))
    cf = assert_compiled_matches(loss, *args, rtol=2e-5, atol=2e-5)
    plan = _train(cf)[0]
    kinds = [k for k in _kinds(plan) if k.startswith("row:")]
    # the bias add joins the forward's rows group, which then writes the sum for
    # layer_norm_backward
    assert kinds == ["row:gelu_backward -> layer_norm_backward -> sum over rows"], plan.describe()
    (rg,) = _rows_groups(plan)
    assert any(e.prim.name == "add" and e.out in rg.outputs for e in rg.eqns), plan.describe()


def test_gradient_summed_on_token_rows_joins_the_backward_row_kernel():
    # the encoder layer's shape: LayerNorm on (N, T, E), the next block on (tokens, E) rows;
    # its input gradient (residual + feed-forward) is added on the tokens and reshaped to
    # (N, T, E): the add runs in the first LayerNorm's backward kernel, the reshape is gone
    def f(x, w1, w2):
        t = F.layer_norm(x, (12,)).reshape(20, 12)
        return F.layer_norm(t + F.relu(t @ w1) @ w2, (12,))
    cf = assert_compiled_matches(f, T(4, 5, 12, seed=1), T(12, 16, seed=2), T(16, 12, seed=3),
                                 rtol=2e-5, atol=2e-5)
    _, bwd, _ = _train(cf)
    viewed = [rg for rg in _rows(bwd) if rg.g_view is not None]
    assert len(viewed) == 1 and viewed[0].rows_shape == (4, 5, 12), bwd.describe()
    assert tuple(viewed[0].g_pro.shape) == (20, 12)
    assert "add -> layer_norm_backward" in viewed[0].describe()


def test_encoder_layer_backward_kernel_against_float64():
    # the encoder layer's backward row kernel: both prologues (x = a + bias + residual; the
    # gradient = the GEMM's path + the residual's) in one loop, dweight/dbias and the row
    # sums in one loop, the bias gradient (dx summed over rows) in the dx loop. Values
    # against the same function in float64 (numpy's reference, no kernel): float32 rounding.
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
    _, bwd, _ = _train(cf)
    (rg,) = [rg for rg in _rows(bwd) if rg.eqn.prim.name == "layer_norm_backward"]
    assert rg.x_pro is not None and rg.g_pro is not None and rg.col_sum is not None, rg.describe()
    src = [k for k in bwd.kernels if getattr(k, "group", None) is rg][0].spec().source
    assert "gb[k] = tg[0]" in src.split("xb[k] = t[0]")[1].split("for k")[0]   # one prologue loop
    assert "dxsb[k] += dxv" in src
    # float64 reference: x, its statistics, y; dy = g @ m.T + g; dx, dw, db, dbias
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
