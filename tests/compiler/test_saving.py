"""What compiled training saves (compiler/saving.py): an elementwise value the forward writes
anyway (read by a matmul) is saved, not recomputed by the backward."""
from __future__ import annotations

import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.fusion import Group
from differential import assert_compiled_matches
from inputs import T, training_variant


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _train(cf):
    return training_variant(cf, only=False)


def two_layers(x, w1, w2):
    return tj.tanh(x @ w1) @ w2


def _recomputes_tanh(plan) -> bool:
    return any(isinstance(it, Group) and any(e.prim.name == "tanh" for e in it.eqns) for it in plan.items)


@pytest.mark.parametrize("flag", ["1", "0"])
def test_activation_read_by_a_matmul_is_saved(monkeypatch, flag):
    monkeypatch.setenv("TRACEJIT_SAVE_WRITTEN", flag)
    cf = assert_compiled_matches(two_layers, T(6, 5, seed=1), T(5, 7, seed=2), T(7, 3, seed=3),
                                 rtol=1e-5, atol=1e-5)
    fwd, bwd, n_saved = _train(cf)
    saved = [v.aval.shape for v in fwd.graph.outputs[1:1 + n_saved]]
    if flag == "1":
        # tanh(x @ w1) is written for the second matmul: saved, and the backward reads it
        # (for w2's gradient and tanh's) instead of recomputing it from x @ w1
        assert not _recomputes_tanh(bwd), bwd.describe()
        assert (6, 7) in saved
    else:
        assert _recomputes_tanh(bwd), bwd.describe()


def test_mlp_layer_backward_recomputes_only_the_layer_norm_input():
    # the MLP workload's hidden layers: LayerNorm's output and the GELU (the next GEMM's
    # operand) are saved; the LayerNorm input (the bias add, which the forward's rows group
    # does not write) is recomputed, and no LayerNorm nor GELU is
    def f(x, w1, b1, g1, c1, w2):
        h = F.gelu(F.layer_norm(x @ w1 + b1, (16,), g1, c1), approximate="tanh")
        return h @ w2
    args = T(8, 12, seed=1), T(12, 16, seed=2), T(16, seed=3), T(16, seed=4), T(16, seed=5), T(16, 4, seed=6)
    cf = assert_compiled_matches(f, *args, rtol=2e-5, atol=2e-5)
    fwd, bwd, n_saved = _train(cf)
    groups = [sorted(e.prim.name for e in it.members) for it in bwd.items if isinstance(it, Group)]
    assert sorted(groups) == [["add"], ["gelu_backward"]], bwd.describe()
    kinds = {it.prim.name if hasattr(it, "prim") else type(it).__name__
             for it in bwd.items if not isinstance(it, Group)}
    assert kinds <= {"matmul", "permute", "getitem", "reshape", "sum", "layer_norm_backward"}, kinds


@pytest.mark.parametrize("flag", ["1", "0"])
def test_layer_norm_output_read_by_fused_work_is_saved(monkeypatch, flag):
    # GELU's gradient reads LayerNorm's output: the forward's rows group writes it beside
    # the GELU (LayerNorm is no elementwise op to recompute), either way
    monkeypatch.setenv("TRACEJIT_SAVE_WRITTEN", flag)

    def f(x, w, c):
        return F.gelu(F.layer_norm(x, (16,), w, c), approximate="tanh")
    cf = assert_compiled_matches(f, T(8, 16, seed=1), T(16, seed=2), T(16, seed=3), rtol=2e-5, atol=2e-5)
    fwd, bwd, n_saved = _train(cf)
    (rg,) = [it for it in fwd.items if isinstance(it, Group) and it.rows]
    assert len(rg.outputs) == 2 and n_saved >= 1
    assert not any(isinstance(it, Group) and it.rows for it in bwd.items), bwd.describe()


def _scan(a, b, c):
    # a selective scan's state: each step's x is read by that step's reduction and by the
    # next step, so each step's kernel writes it
    x = a[:, 0] * 0.0
    ys = []
    for i in range(a.shape[1]):
        x = a[:, i] * x + b[:, i]
        ys.append((x * c[:, i]).sum(-1))
    return tj.stack(ys, 1)


@pytest.mark.parametrize("flag", ["1", "0"])
def test_a_scan_state_read_by_a_reduction_and_the_next_step_is_saved(monkeypatch, flag):
    monkeypatch.setenv("TRACEJIT_SAVE_WRITTEN", flag)
    cf = assert_compiled_matches(_scan, T(3, 6, 4, 5, seed=1), T(3, 6, 4, 5, seed=2),
                                 T(3, 6, 1, 5, seed=3), rtol=1e-5, atol=1e-5)
    fwd, bwd, n_saved = _train(cf)
    # the backward's groups: without the states saved, one recomputes the chain of
    # multiply-adds from the start (two equations a step)
    longest = max(len(it.eqns) for it in bwd.items if isinstance(it, Group))
    if flag == "1":
        assert longest < 12, bwd.describe()
    else:
        assert longest >= 12, bwd.describe()


def test_an_expanded_gather_index_is_a_view_recomputed_not_saved():
    # ``x.gather(1, idx[..., None].expand(-1, -1, C))`` (a batched row lookup): the forward
    # saves idx, not its (B, M, C) broadcast, and neither side writes the broadcast
    torch = pytest.importorskip("torch", reason="compares with PyTorch")
    import numpy as np
    iv = np.random.default_rng(5).integers(0, 5, (3, 7))

    def f(x, idx):
        return x.gather(1, idx[:, :, None].expand(-1, -1, x.shape[-1])) * 2.0
    cf = assert_compiled_matches(f, T(3, 5, 4, seed=1), tj.tensor(iv), rtol=1e-6, atol=1e-6)
    fwd, bwd, n_saved = _train(cf)
    saved = [(tuple(v.aval.shape), v.aval.dtype.name) for v in fwd.graph.outputs[1:1 + n_saved]]
    assert ((3, 7, 1), "int64") in saved and ((3, 7, 4), "int64") not in saved, saved
    for plan in (fwd, bwd):
        assert not any(isinstance(it, Group) and any(e.prim.name == "expand" for e in it.eqns)
                       for it in plan.items), plan.describe()
    x = T(3, 5, 4, seed=1)
    g = np.random.default_rng(6).standard_normal((3, 7, 4)).astype(np.float32)
    (cf(x, tj.tensor(iv)) * tj.tensor(g)).sum().backward()
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    ti = torch.tensor(iv)
    (f(tx, ti) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
