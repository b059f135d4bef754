"""What a compiled training call reads off its graphs (compiler/graph_facts.py): an input
the backward reads but eager autograd would not save (a bias the backward adds again to
recompute a GELU's or a LayerNorm's input) is read from a copy the call takes, so an in-place
write to it between the forward and ``backward()`` (an EMA, a clamp, a pruning mask under
no_grad) gives PyTorch's gradients; a write to a value eager saves still refuses, as
PyTorch does."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tracejit as tj

pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


def _model(L, kind):
    nn = L.nn
    if kind == "layernorm":
        return nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 3))
    if kind == "batchnorm":
        return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3), nn.SiLU())


def _write(L, p, how):
    with L.no_grad():
        if how == "mul_":
            p.mul_(0.5)
        elif how == "copy_":
            p.copy_(p * 0.7 + 0.01)
        else:
            p.clamp_(-0.05, 0.05)


def _steps(L, model, fn, k, how, xs):
    """Per step: forward, write parameter k in place, backward; the losses and gradients
    (or the error's type where the backward refuses)."""
    ps = list(model.parameters())
    out = []
    for xv in xs:
        loss = (fn(L.tensor(xv)) ** 2).sum()
        _write(L, ps[k], how)
        try:
            loss.backward()
        except RuntimeError:
            return "refused"
        out.append([loss.item()] + [p.grad.numpy().copy() for p in ps])
        for p in ps:
            p.grad = None
    return out


@pytest.mark.parametrize("kind", ["layernorm", "batchnorm", "gelu"])
@pytest.mark.parametrize("how", ["mul_", "copy_", "clamp_"])
def test_a_weight_written_in_place_before_backward_gives_pytorchs_gradients(kind, how):
    tj.manual_seed(0)
    n = len(list(_model(tj, kind).parameters()))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    allowed = 0
    for k in range(n):
        tj.manual_seed(0)
        m = _model(tj, kind)
        tm = _model(torch, kind)
        with torch.no_grad():
            for p, q in zip(tm.parameters(), m.parameters()):
                p.copy_(torch.from_numpy(q.detach().numpy().copy()))
        want = _steps(torch, tm, tm, k, how, xs)
        got = _steps(tj, m, tj.compile(m), k, how, xs)
        if want == "refused":
            assert got == "refused", (k, "PyTorch refuses this write")
            continue
        assert got != "refused", (k, "PyTorch allows this write")
        allowed += 1
        for g_step, w_step in zip(got, want):
            # a bias before BatchNorm has a gradient of exactly 0, left as float32 rounding
            # of terms as large as the step's largest gradient: its tolerance scales with them
            atol = 1e-5 * max(1.0, max(float(np.abs(w).max()) for w in w_step[1:]))
            for g, w in zip(g_step, w_step):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
    # (the biases before the LayerNorm, the GELU and the ReLU, and the last ones, at least)
    assert allowed >= 3


def test_the_call_keeps_a_copy_only_of_the_inputs_eager_would_not_save():
    tj.manual_seed(0)
    m = _model(tj, "gelu")
    node = tj.compile(m)(tj.randn(5, 4)).grad_fn
    copied = node.program._copied[node.diff_idx]
    # inputs 2 and 4 are the biases: the backward adds them again for the GELU's and the
    # SiLU's derivatives; the weights, which eager saves, are read where they are
    assert copied == (2, 4)
    for i in copied:
        b = node.inputs[i].detach().numpy()
        assert any(a.shape == b.shape and np.array_equal(a, b) and not np.shares_memory(a, b)
                   for a in node.saved if isinstance(a, np.ndarray))



def test_shapes_of_binds_sizes_once_for_all_symbolic_shapes(monkeypatch):
    from types import SimpleNamespace

    from tracejit.compiler.graph_facts import _shapes_of
    from tracejit.jit import interpreter
    from tracejit.shapes import Sym

    calls = []

    def bind(graph, inputs):
        calls.append(list(inputs))
        return {"n": inputs[0].shape[0]}

    monkeypatch.setattr(interpreter, "bind_symbols", bind)
    n = Sym.symbol("n", 8)

    def var(*dims):
        return SimpleNamespace(aval=SimpleNamespace(shape=dims))

    shape = _shapes_of(lambda: [np.zeros((5, 3))], graph=None)
    assert shape(var(2, 4)) == (2, 4)
    assert calls == []                       # (a static shape binds nothing)
    assert shape(var(n, 64)) == (5, 64)
    assert shape(var(3, n)) == (3, 5)
    assert shape(var(n)) == (5,)
    assert len(calls) == 1                   # (one binding for every absent gradient)
