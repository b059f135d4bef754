"""The reference interpreter (jit/interpreter.py) and its unrolled form, `straight_line`:
the same values, the same gradients and the same autograd graph for every kind of
equation (plain primitives, literals, runtime scalars, symbolic dims, control flow)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.interpreter import interpret, last_uses, straight_line


def _graph(fn, *args, **kw):
    cf = tj.trace(fn, compiler="interpret", **kw)
    cf(*args)
    (entry,) = cf.entries
    return entry.graph


def _array(v):
    return v.detach().numpy() if isinstance(v, tj.Tensor) else np.asarray(v)


def _same(graph, args, drops=None):
    want = interpret(graph, args)
    got = straight_line(graph, drops)(args)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(_array(a), _array(b))
    return got, want


def test_unrolled_graph_gives_the_interpreters_values_and_gradients():
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    w = tj.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)

    def fn(x, w):
        h = (x @ w).relu() * 0.5 + 1.0
        return h.sum(), h.exp().mean()
    g = _graph(fn, x, w)
    for drops in (None, last_uses(g)):
        got, want = _same(g, [x, w], drops)
        w.grad = None
        want[0].backward()
        gw = w.grad.numpy().copy()
        w.grad = None
        got[0].backward()
        np.testing.assert_array_equal(w.grad.numpy(), gw)
        assert type(got[0].grad_fn) is type(want[0].grad_fn)


def test_unrolled_graph_takes_runtime_scalars_and_symbolic_dims():
    def fn(x, s):
        return (x * s).sum(0) + x.shape[0]
    cf = tj.trace(fn, compiler="interpret", dynamic=True)
    x = tj.tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    cf(x, 2.5)
    (entry,) = cf.entries
    g = entry.graph
    assert g.symbols, "the batch dim should be symbolic"
    for n in (4, 7):
        xn = tj.tensor(np.arange(n * 3, dtype=np.float32).reshape(n, 3))
        ins = [xn, 2.5] + list(entry.const_tensors)
        ins = [ins[i] for i in range(len(g.inputs))]
        _same(g, ins, last_uses(g))


def test_unrolled_graph_runs_control_flow_like_the_interpreter():
    @tj.script(compiler="interpret")
    def fn(x, n: int):
        acc = x
        for _ in range(n):
            acc = acc * 0.5 + 1.0
        if acc.sum() > 0:
            acc = acc + 1.0
        return acc
    x = tj.tensor(np.ones((3, 2), dtype=np.float32))
    fn(x, 3)
    for entry in fn.entries:
        g = entry.graph
        ins = [x, 3][:len(g.inputs)]
        if any(e.prim.kind == "control" for e in g.eqns):
            _same(g, ins, last_uses(g))
            break
    else:
        pytest.skip("this function captured without a control equation")


def test_a_dropped_value_is_gone_after_its_last_use():
    x = tj.tensor(np.ones((5, 5), dtype=np.float32))

    def fn(x):
        a = x * 2.0
        b = a + 1.0
        return (b * 3.0).sum()
    g = _graph(fn, x)

    def alive_at_each_bind(drops):
        import weakref
        outs, alive = [], []
        run = straight_line(g, drops)
        real = run.__globals__["BIND"]

        def call(prim, *args, **params):   # counts the earlier results still alive
            alive.append(sum(r() is not None for r in outs))
            out = real(prim, *args, **params)
            outs.append(weakref.ref(out))
            return out
        run.__globals__["BIND"] = call
        (out,) = run([x])
        assert float(out) == pytest.approx(225.0)
        return alive
    # with drops, each temporary goes after its last use: one alive at each later call
    assert alive_at_each_bind(last_uses(g)) == [0, 1, 1, 1]
    # without, every value lives until the graph ends
    assert alive_at_each_bind(None) == [0, 1, 2, 3]
