"""``scan``: loops whose trip count is known when they start (for-range over a dynamic
size or a runtime scalar, and ``tj.jit.scan``), compiled and differentiated."""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import CompileError


def _data(T, seed=0, batch=2):
    r = np.random.default_rng(seed + T)
    mk = lambda *s, scale=1.0: tj.tensor((r.standard_normal(s) * scale).astype(np.float32), requires_grad=True)  # noqa: E731
    return mk(batch, T, 3), mk(3, 4, scale=0.5), mk(4, 4, scale=0.5), mk(batch, 4)


def _grads(loss, ts):
    for t in ts:
        t.grad = None
    loss.backward()
    return [None if t.grad is None else t.grad.numpy().copy() for t in ts]


def rnn_loop(x, w, u, h):
    for t in range(x.shape[1]):                    # a dynamic dim once lengths vary
        h = tj.tanh(x[:, t].mm(w) + h.mm(u))
    return (h * h).sum()


def rnn_scan(x, w, u, h0):
    def step(h, xt):
        h = tj.tanh(xt.mm(w) + h.mm(u))
        return h, h * 2.0
    h, ys = tj.jit.scan(step, h0, x.transpose(0, 1))   # time-major slices
    return ys.sum() + (h * h).sum()


@pytest.mark.parametrize("fn,mode", [(rnn_loop, "script"), (rnn_scan, "trace"), (rnn_scan, "script")])
def test_sequences_of_varying_length_compile_at_most_three_times(fn, mode, compiler):
    cf = getattr(tj, mode)(fn, compiler=compiler)
    for T in (3, 5, 8, 4, 7):
        ts = _data(T)
        got, gg = cf(*ts), None
        gg = _grads(got, ts)
        exp = fn(*ts)
        ge = _grads(exp, ts)
        assert got.item() == pytest.approx(exp.item(), rel=1e-5)
        for a, b in zip(gg, ge):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    st = cf.cache_stats()
    assert st["compiles"] == 2 and st["dynamic_dims"] == [("x", 1)]
    assert "scan" in cf.entries[0].graph.text(False) or fn is rnn_loop   # tj.jit.scan never unrolls
    assert "scan" in cf.entries[-1].graph.text(False)


def test_scan_eagerly_is_a_python_loop_with_stacked_ys():
    xs = tj.arange(6.0).reshape(3, 2)
    carry, ys = tj.jit.scan(lambda c, x: (c + x, c * 1.0), tj.zeros(2), xs)
    assert carry.tolist() == [6.0, 9.0]
    assert ys.tolist() == [[0.0, 0.0], [0.0, 1.0], [2.0, 4.0]]
    carry, ys = tj.jit.scan(lambda c, x: (c + x, c * 1.0), tj.zeros(2), xs[:0])
    assert carry.tolist() == [0.0, 0.0] and tuple(ys.shape) == (0, 2)


def test_a_loop_over_a_runtime_scalar_runs_and_says_why_it_has_no_backward():
    def f(x, n: int):
        for i in range(n):
            x = x * 1.5
        return x.sum()

    cf = tj.script(f)
    with tj.no_grad():
        assert cf(tj.ones(2), 3).item() == pytest.approx(6.75)
        assert cf(tj.ones(2), 0).item() == 2.0
    assert cf.cache_stats()["compiles"] == 1
    with pytest.raises(CompileError, match="trip count is a runtime scalar"):
        cf(tj.ones(2, requires_grad=True), 2)   # the compiled backward is planned at capture
    # the reference interpreter differentiates it through eager autograd
    x = tj.ones(2, requires_grad=True)
    tj.script(f, compiler="interpret")(x, 2).backward()
    assert x.grad.tolist() == [2.25, 2.25]


def test_a_body_with_its_own_runtime_control_flow_refuses_backward_clearly():
    def f(x):
        h = x[:, 0] * 0
        for t in range(x.shape[1]):
            h = h + x[:, t] if x[:, t].sum() > 0 else h - x[:, t]
        return h.sum()

    cf = tj.script(f)
    x = tj.ones(2, 3, requires_grad=True)
    cf(x).backward()                       # static length: unrolled, differentiable
    with pytest.raises(CompileError, match="own control flow"):
        cf(tj.ones(2, 5, requires_grad=True))


def test_scripted_lstm_on_varying_lengths_compiles_at_most_three_times_and_matches_eager():
    """The time loop is one scan equation: a new sequence length reuses the program."""
    from tracejit import nn
    rng = np.random.default_rng(11)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 6, batch_first=True)
            self.head = nn.Linear(6, 2)

        def forward(self, x):
            out, (h, c) = self.rnn(x)
            return (self.head(out) ** 2).mean() + c.sum() * 0.1

    eager, model = Model(), Model()
    model.load_state_dict(eager.state_dict())
    compiled = tj.script(model)
    opt_e = tj.optim.SGD(eager.parameters(), lr=0.05)
    opt_c = tj.optim.SGD(model.parameters(), lr=0.05)
    for T in (5, 9, 3, 12, 7, 9):
        x = tj.tensor(rng.standard_normal((3, T, 4)).astype("float32"))
        for m, fn, opt in ((eager, eager, opt_e), (model, compiled, opt_c)):
            opt.zero_grad()
            loss = fn(x)
            loss.backward()
            opt.step()
            if m is eager:
                le = loss.item()
        assert loss.item() == pytest.approx(le, rel=1e-5)
        for (n, p), q in zip(model.named_parameters(), eager.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    assert compiled.forward.cache_stats()["compiles"] <= 3


def test_a_loop_that_fills_a_python_list_unrolls_with_its_bound_specialized():
    """time_sequence_prediction's pattern: ``for i in range(future): outputs += [y]``."""
    def f(x, future: int = 0):
        outputs = []
        h = x[:, 0] * 0
        for t in range(x.shape[1]):
            h = tj.tanh(h + x[:, t])
            outputs += [h]
        for i in range(future):
            h = tj.tanh(h * 0.5)
            outputs += [h]
        return tj.stack(outputs, 1)

    cf = tj.script(f, compiler="interpret")
    for T, fut in ((3, 0), (5, 2), (5, 2), (4, 2), (5, 3)):
        x = tj.tensor(np.random.default_rng(T).standard_normal((2, T)).astype(np.float32))
        np.testing.assert_allclose(cf(x, fut).numpy(), f(x, fut).numpy(), rtol=1e-6)
    assert cf.cache_stats()["compiles"] == 4            # (5, 2) was a hit; future=3 is new
    guards = [d.text([x.name for x in e.descs]) for e in cf.entries for d in e.decisions]
    assert any(g.startswith("future == 2") for g in guards), guards


def test_eager_scan_slices_share_one_backward_node_that_stacks_their_gradients():
    """xs of an eager scan are sliced by `unbind_steps`: gradients of used slices are
    stacked (zeros for unused ones), equal to indexing x[k], and differentiable again."""
    from tracejit.jit.loops import unbind_steps
    r = np.random.default_rng(3)
    xv = r.standard_normal((5, 2, 3))
    x = tj.tensor(xv, requires_grad=True)          # float64
    s = unbind_steps(x)
    assert len(s) == 5 and all(tuple(p.shape) == (2, 3) for p in s)
    assert len({id(p.grad_fn) for p in s}) == 1
    loss = (s[0] * 2.0).sum() + (s[3] ** 3).sum()
    (g,) = tj.autograd.grad(loss, [x], create_graph=True)
    exp = np.zeros_like(xv)
    exp[0] = 2.0
    exp[3] = 3 * xv[3] ** 2
    np.testing.assert_allclose(g.detach().numpy(), exp, rtol=1e-12)
    (gg,) = tj.autograd.grad(g.sum(), [x])         # second order through the stack
    exp2 = np.zeros_like(xv)
    exp2[3] = 6 * xv[3]
    np.testing.assert_allclose(gg.numpy(), exp2, rtol=1e-12)
    with tj.no_grad():
        assert unbind_steps(x)[0].grad_fn is None


def test_eager_scan_gradients_match_torch():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(4)
    xv, wv, h0v = r.standard_normal((6, 2, 3)), r.standard_normal((3, 3)) * 0.5, r.standard_normal((2, 3))

    def run(lib, x, w, h0, scan):
        return scan(lambda h, xt: (lib.tanh(xt + h.mm(w)),) * 2, h0, x)

    def torch_scan(f, h, xs):
        ys = []
        for k in range(xs.shape[0]):
            h, y = f(h, xs[k])
            ys.append(y)
        return h, torch.stack(ys)

    tx, tw, th = (tj.tensor(v, requires_grad=True) for v in (xv, wv, h0v))
    px, pw, ph = (torch.tensor(v, requires_grad=True) for v in (xv, wv, h0v))
    h, ys = run(tj, tx, tw, th, tj.jit.scan)
    ((ys[1:] * 1.5).sum() + h.sum()).backward()
    hp, ysp = run(torch, px, pw, ph, torch_scan)
    ((ysp[1:] * 1.5).sum() + hp.sum()).backward()
    for a, b in ((tx, px), (tw, pw), (th, ph)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_backward_reads_forward_residuals_and_hoists_weight_gradients():
    """The differentiated scan's forward loop returns the per-step residuals (no second
    forward loop in the backward, no matmul recomputed per step), and the weights'
    gradients are one matmul each after the reverse loop, not one per step."""
    from tracejit.jit.autodiff import split
    cf = tj.trace(rnn_scan)
    ts = _data(4)
    cf(*ts)
    g = cf.entries[0].graph
    fwd, bwd, n_saved = split(g, [True] * len(g.inputs))

    def count(graph, name):
        return sum(e.prim.name == name for e in graph.eqns)
    (fscan,) = [e for e in fwd.eqns if e.prim.name == "scan"]
    assert fscan.params["n_res"] == 3          # the carry entering, both matmul outputs
    assert count(bwd, "scan") == 1             # the reverse loop only
    (rscan,) = [e for e in bwd.eqns if e.prim.name == "scan"]
    body = rscan.params["body_graph"]
    assert count(body, "matmul") == 2          # dh and dx per step; dW, dU hoisted
    assert count(bwd, "matmul") == 2           # ... here, over all steps at once
    assert rscan.params["n_carry"] == 1        # only dh is carried: no per-step accumulators


@pytest.mark.parametrize("reverse", [False, True])
def test_hoisted_gradient_of_a_weight_applied_to_a_per_step_value(reverse, compiler):
    """v's per-step gradient is tanh(..)^T @ g, with tanh(..) recomputed in the reverse loop
    (not a stacked input): the loop stacks it for the hoisted GEMM; bias-like constants
    (b) keep their per-step accumulator. Compiled equals eager, for varying lengths."""
    def f(x, u, v, b, h0):
        def step(h, xt):
            y = tj.tanh(h.mm(u) + xt)
            h = y.mm(v) + b
            return h, y
        h, ys = tj.jit.scan(step, h0, x, reverse=reverse)
        return (h * h).sum() + (ys * ys).sum()

    cf = tj.trace(f, compiler=compiler)
    r = np.random.default_rng(7)
    for T in (3, 5):
        vals = [r.standard_normal(s).astype(np.float32) * 0.5 for s in ((T, 2, 4), (4, 4), (4, 4), (4,), (2, 4))]
        ts = [tj.tensor(v, requires_grad=True) for v in vals]
        got = _grads(cf(*ts), ts)
        exp = _grads(f(*ts), ts)
        for a, b in zip(got, exp):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    from tracejit.jit.autodiff import split
    g = cf.entries[0].graph
    _, bwd, _ = split(g, [True] * len(g.inputs))
    (rscan,) = [e for e in bwd.eqns if e.prim.name == "scan"]
    assert sum(e.prim.name == "matmul" for e in rscan.params["body_graph"].eqns) == 2   # dh, dy
    assert rscan.params["n_carry"] == 2                                                 # dh, acc of b
