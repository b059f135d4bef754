"""Shared checks of the recurrent layer ops (tests/nn/test_{rnn,gru,lstm}_layer.py): a
tracejit layer and a PyTorch one with the same weights (by state_dict name), op-call counts,
and the value/gradient comparisons every layer kind runs the same way."""
from __future__ import annotations

import numpy as np

import tracejit as tj
from tracejit import nn


def torch_pair(torch, kind: str, seed: int, sizes: tuple = (3, 4), dtype: str = "float64", **kw):
    """(ours, theirs): `nn.<kind>(*sizes, **kw)` in `dtype` (float64 or float32) with
    PyTorch's initial weights, loaded by state_dict name."""
    torch.manual_seed(seed)
    t = getattr(torch.nn, kind)(*sizes, **kw)
    t = t.double() if dtype == "float64" else t
    m = getattr(nn, kind)(*sizes, dtype=dtype, **kw)
    m.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return m, t


def count_calls(monkeypatch, prims) -> dict:
    """Counts of each primitive's eager runs (`prim.run`: its implementations and numpy form), by name (the dict fills as they run)."""
    calls = {p.name: 0 for p in prims}
    for prim in prims:
        def counted(xp, *a, _orig=prim.run, _name=prim.name, **kw):
            calls[_name] += 1
            return _orig(xp, *a, **kw)
        monkeypatch.setattr(prim, "run", counted)
    return calls


def gemm_count(calls: dict) -> int:
    """The products among `count_calls`' counts over ``linalg.PRODUCTS`` (matmul and its
    transposed-operand records, which matmul's backward runs)."""
    from tracejit.ops.linalg import PRODUCTS
    return sum(calls[p.name] for p in PRODUCTS)


def check_values_and_gradients(torch, m, t, kw, after_forward=None):
    """Outputs, input/state gradients and every parameter's gradient of `m` equal `t`'s for
    one random input, initial state(s) and output cotangents (float64). An LSTM's state is
    the pair (h, c)."""
    r = np.random.default_rng(1)
    dirs = 2 if kw.get("bidirectional") else 1
    layers = kw.get("num_layers", 1)
    pair_state = isinstance(t, torch.nn.LSTM)
    xv = r.standard_normal((2, 6, 3) if kw.get("batch_first") else (6, 2, 3))
    states = [r.standard_normal((layers * dirs, 2, 4)) for _ in range(2 if pair_state else 1)]
    ours = [tj.tensor(v, requires_grad=True) for v in [xv] + states]
    theirs = [torch.tensor(v, requires_grad=True) for v in [xv] + states]

    def run(module, args):
        o, h = module(args[0], tuple(args[1:]) if pair_state else args[1])
        return [o] + (list(h) if pair_state else [h])
    outs, outs_t = run(m, ours), run(t, theirs)
    for a, b in zip(outs, outs_t):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-13)
    if after_forward is not None:
        after_forward(outs[0])
    cots = [r.standard_normal(tuple(v.shape)) for v in outs]
    sum((o * tj.tensor(g)).sum() for o, g in zip(outs, cots)).backward()
    sum((o * torch.tensor(g)).sum() for o, g in zip(outs_t, cots)).backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    for name, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), getattr(t, name).grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


def check_final_state_only(torch, m, t):
    """A loss of the final state alone (the per-step outputs unused: they count as zeros;
    an LSTM's c) differentiates as PyTorch."""
    xv = np.random.default_rng(2).standard_normal((5, 3, 3))
    x, xt = tj.tensor(xv, requires_grad=True), torch.tensor(xv, requires_grad=True)
    last = (lambda out: out[1][1]) if isinstance(t, torch.nn.LSTM) else (lambda out: out[1])
    last(m(x)).sum().backward()
    last(t(xt)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-13)


def check_saturated_gates_stay_finite(kind: str):
    """Weights and inputs that drive every gate far into saturation: no overflow warning
    raised as an error, finite outputs and input gradients (the last state joins the loss:
    an LSTM's c, the others' h)."""
    m = getattr(nn, kind)(2, 3)
    with tj.no_grad():
        for p in m.parameters():
            p.fill_(40.0)
    x = tj.tensor(np.array([[[5.0, -5.0]], [[-9.0, 9.0]]], np.float32) * 20, requires_grad=True)
    with np.errstate(all="raise"):
        out, state = m(x)
        last = state[1] if kind == "LSTM" else state
        (out.sum() + last.sum()).backward()
    assert np.isfinite(out.detach().numpy()).all() and np.isfinite(x.grad.numpy()).all()
