"""A compiled training call's short paths: the generated call (`CompiledProgram.
fast_training`) builds the node and output `__call__` builds, and a compiled loss's
``loss.backward()`` through `CompiledNode.unit_backward` hands the gradients the forward
computed straight to the leaves, with the engine's results; every case the short paths do
not cover goes through `__call__` and the engine as before."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler.executor import CompiledNode, CompiledProgram
from tracejit.errors import InplaceModifiedError


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")


@pytest.fixture
def taken(monkeypatch):
    """The short path's answers, in order (True: it ran the backward)."""
    seen = []
    real = CompiledNode.unit_backward
    monkeypatch.setattr(CompiledNode, "unit_backward", lambda self, t: seen.append(real(self, t)) or seen[-1])
    return seen


def _inputs(n=257):
    r = np.random.default_rng(0)
    return [r.standard_normal(n).astype(np.float32) for _ in range(3)]


def _loss(x, y, z):
    a = x * y + z
    return (a * tj.tanh(a)).sum()


def _eager_grads(arrays, scale=1.0):
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    (_loss(*ts) * scale).backward()
    return [t.grad.numpy() for t in ts]


def test_a_compiled_loss_backward_takes_the_short_path_with_the_engines_results(taken):
    arrays = _inputs()
    f = tj.script(_loss)
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    f(*ts).backward()
    assert taken == [True]
    first = [t.grad.numpy().copy() for t in ts]
    # the engine on the same compiled call (an explicit unit gradient: not the short path)
    us = [tj.tensor(a, requires_grad=True) for a in arrays]
    f(*us).backward(tj.tensor(1.0))
    assert taken == [True]
    for t, u in zip(ts, us):
        np.testing.assert_array_equal(t.grad.numpy(), u.grad.numpy())
    for g, e in zip(first, _eager_grads(arrays)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    # a second step accumulates into .grad
    f(*ts).backward()
    assert taken == [True, True]
    for t, g in zip(ts, first):
        np.testing.assert_array_equal(t.grad.numpy(), g + g)


def test_the_leaves_take_the_gradient_memory_and_reset_grads_keep_it(taken):
    f = tj.script(_loss)
    ts = [tj.tensor(a, requires_grad=True) for a in _inputs(1 << 22)]   # 16 MiB: output slots
    addrs = []
    for _ in range(3):
        for t in ts:
            t.grad = None
        f(*ts).backward()
        addrs.append([t.grad.numpy().ctypes.data for t in ts])
    assert taken == [True] * 3
    assert addrs[0] == addrs[1] == addrs[2]          # no copies: the slots' arrays each step
    assert len(set(addrs[0])) == 3


def test_hooks_retained_graphs_and_shared_leaves_go_through_the_engine(taken):
    arrays = _inputs()
    f = tj.script(_loss)
    want = _eager_grads(arrays)
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    seen = []
    ts[1].register_hook(lambda g: seen.append(1))
    f(*ts).backward()
    assert taken == [False] and seen == [1]
    for t, e in zip(ts, want):
        np.testing.assert_allclose(t.grad.numpy(), e, rtol=1e-5, atol=1e-6)
    us = [tj.tensor(a, requires_grad=True) for a in arrays]
    loss = f(*us)
    loss.backward(retain_graph=True)          # not the short path (the graph is kept) ...
    loss.backward()                           # ... and the second one is its to take
    assert taken == [False, True]
    for u, e in zip(us, want):
        np.testing.assert_allclose(u.grad.numpy(), 2 * e, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    # a node hook on the loss's node, retain_grad on the loss
    vs = [tj.tensor(a, requires_grad=True) for a in arrays]
    loss = f(*vs)
    loss.retain_grad()
    loss.backward()
    assert taken[-1] is False and loss.grad.item() == 1.0
    # the same leaf twice: one leaf node on two edges
    w = tj.tensor(arrays[0], requires_grad=True)
    f(w, w, vs[2]).backward()
    assert taken[-1] is False
    e = tj.tensor(arrays[0], requires_grad=True)
    _loss(e, e, tj.tensor(arrays[2])).backward()
    np.testing.assert_allclose(w.grad.numpy(), e.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_an_input_changed_in_place_after_the_forward_is_reported(taken):
    f = tj.script(_loss)
    ts = [tj.tensor(a, requires_grad=True) for a in _inputs()]
    x = ts[0].detach()
    loss = f(*ts)
    x.add_(1.0)                                # the leaf's data through a detached alias
    with pytest.raises(InplaceModifiedError, match="modified in place"):
        loss.backward()                        # (x * y saves x, in eager and PyTorch)
    assert taken == []                         # raised before any gradient was handed over
    assert all(t.grad is None for t in ts)


def test_an_input_no_gradient_reads_may_change_before_backward(taken):
    """z of x * y + z: nothing saves it (eager's add keeps no operand, nor does PyTorch's), so
    writing into it after the forward leaves the gradients as they were."""
    arrays = _inputs()
    want = _eager_grads(arrays)
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    loss = tj.script(_loss)(*ts)
    ts[2].detach().add_(1.0)
    loss.backward()
    for t, w in zip(ts, want):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-5, atol=1e-6)


def test_a_non_leaf_input_and_a_non_unit_gradient_use_the_engine(taken):
    arrays = _inputs()
    f = tj.script(_loss)
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    f(ts[0], ts[1] * 2.0, ts[2]).backward()   # an edge to mul's node: not only leaves
    assert taken == [False]
    us = [tj.tensor(a, requires_grad=True) for a in arrays]
    f(*us).backward(tj.tensor(3.0))
    assert taken == [False]
    for u, e in zip(us, _eager_grads(arrays, 3.0)):
        np.testing.assert_allclose(u.grad.numpy(), e, rtol=1e-5, atol=1e-5)


def _node_parts(t):
    n = t.grad_fn
    return (type(n), n.next_functions, n.num_outputs, n.program, n.inputs, n.versions,
            n.diff_idx, n.taken, [a.tolist() for a in n.saved])


def test_a_training_call_runs_the_generated_call_with_the_node_call_builds(monkeypatch):
    built, general = [], []
    real_gen, real_call = CompiledProgram._generated_train, CompiledProgram.__call__
    monkeypatch.setattr(CompiledProgram, "_generated_train",
                        lambda self, d: built.append(d) or real_gen(self, d))
    monkeypatch.setattr(CompiledProgram, "__call__", lambda self, ins: general.append(1) or real_call(self, ins))
    arrays = _inputs()
    f = tj.script(lambda x, y, z: (x * y + z).sum())
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    ts[1].requires_grad_(False)
    q = ts[2] * 1.0                                    # an input that is not a leaf
    for _ in range(3):
        out = f(ts[0], ts[1], q)
    assert built == [(0, 2)] and general == [1]        # the capture's call, then generated
    prog = out.grad_fn.program
    ref = prog([ts[0], ts[1], q])[0]
    assert out.requires_grad and out._output_nr == ref._output_nr == 0
    assert out.dtype is ref.dtype and out.device is ref.device and out.item() == ref.item()
    assert _node_parts(out) == _node_parts(ref)
    assert out.grad_fn.next_functions[1][0] is q.grad_fn
    out.backward()
    np.testing.assert_array_equal(ts[0].grad.numpy(), arrays[1])
    np.testing.assert_array_equal(ts[2].grad.numpy(), np.ones_like(arrays[2]))


def test_the_generated_call_records_conds_and_outputs_without_gradient(monkeypatch):
    arrays = _inputs()
    f = tj.script(lambda x, y: x * 2.0 if x.sum() > 0 else x * y)
    x = tj.tensor(np.abs(arrays[0]), requires_grad=True)
    y = tj.tensor(arrays[1], requires_grad=True)
    for _ in range(3):
        out = f(x, y)
    assert out.grad_fn.taken == [True]
    np.testing.assert_array_equal(out.detach().numpy(), np.abs(arrays[0]) * 2.0)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(arrays[0], 2.0))
    assert y.grad is None                              # the untaken branch reads y
    g = tj.script(lambda x, y: (y * 2.0).sum())
    for _ in range(3):
        out = g(x, tj.tensor(arrays[1]))
    assert not out.requires_grad and out.grad_fn is None


def test_gradients_that_share_memory_are_never_handed_to_two_leaves(taken):
    arrays = _inputs()
    f = tj.script(lambda x, y: (x + y).sum())          # one buffer of ones for both
    x, y = (tj.tensor(a, requires_grad=True) for a in arrays[:2])
    f(x, y).backward()
    assert taken == [True]
    assert not np.shares_memory(x.grad.numpy(), y.grad.numpy())
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(arrays[0]))
    np.testing.assert_array_equal(y.grad.numpy(), np.ones_like(arrays[0]))
    g = tj.script(lambda x, y: (x * y).sum())          # d/dx is y itself
    u, v = (tj.tensor(a, requires_grad=True) for a in arrays[:2])
    g(u, v).backward()
    assert taken == [True, True]
    assert not np.shares_memory(u.grad.numpy(), v.detach().numpy())
    assert not np.shares_memory(v.grad.numpy(), u.detach().numpy())
    np.testing.assert_array_equal(u.grad.numpy(), arrays[1])
    np.testing.assert_array_equal(v.grad.numpy(), arrays[0])


def test_the_short_path_leaves_gradients_the_loss_does_not_reach_unset(taken):
    arrays = _inputs()
    # a cond: the untaken branch reads y, so y gets no gradient; without one, z is unused
    f = tj.script(lambda x, y: (x * 2.0).sum() if x.sum() > 0 else (x * y).sum())
    g = tj.script(lambda x, y, z: (x * y).sum() + 0.0 * y.sum())
    for step in range(3):
        x = tj.tensor(np.abs(arrays[0]), requires_grad=True)
        y = tj.tensor(arrays[1], requires_grad=True)
        f(x, y).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full_like(arrays[0], 2.0))
        assert y.grad is None
        u, v, w = (tj.tensor(a, requires_grad=True) for a in arrays)
        g(u, v, w).backward()
        np.testing.assert_array_equal(u.grad.numpy(), arrays[1])
        np.testing.assert_allclose(v.grad.numpy(), arrays[0], rtol=1e-6, atol=0)
        assert w.grad is None
    assert taken == [True] * 6
    # the other branch: both reached
    x = tj.tensor(-np.abs(arrays[0]), requires_grad=True)
    y = tj.tensor(arrays[1], requires_grad=True)
    f(x, y).backward()
    assert taken[-1] is True
    np.testing.assert_array_equal(x.grad.numpy(), arrays[1])
    np.testing.assert_array_equal(y.grad.numpy(), -np.abs(arrays[0]))


def test_the_generated_call_makes_the_gradient_tensors_the_leaves_then_take(taken):
    arrays = _inputs()
    f = tj.script(_loss)
    ts = [tj.tensor(a, requires_grad=True) for a in arrays]
    f(*ts).backward()                       # the capture's call: a node without them
    for t in ts:
        t.grad = None
    loss = f(*ts)                           # the generated call's node: made before the kernel
    shells = loss.grad_fn.shells
    assert len(shells) == 3 and all(s._data is None and s.dtype is t.dtype for s, t in zip(shells, ts))
    loss.backward()
    assert taken == [True, True] and loss.grad_fn.shells is None
    assert all(t.grad is s for t, s in zip(ts, shells))
    for t, e in zip(ts, _eager_grads(arrays)):
        np.testing.assert_allclose(t.grad.numpy(), e, rtol=1e-5, atol=1e-6)


def test_a_loss_of_many_leaves_takes_the_short_path_unless_a_leaf_repeats(taken):
    r = np.random.default_rng(1)
    arrays = [r.standard_normal(33).astype(np.float32) for _ in range(6)]
    f = tj.script(lambda a, b, c, d, e, g: (a * b + c * d - e * g).sum())
    ts = [tj.tensor(x, requires_grad=True) for x in arrays]
    for _ in range(3):
        for t in ts:
            t.grad = None
        f(*ts).backward()
    assert taken == [True] * 3
    want = [arrays[1], arrays[0], arrays[3], arrays[2], -arrays[5], -arrays[4]]
    for t, w in zip(ts, want):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-6, atol=0)
    # the same leaf on two edges (1st and 6th): the engine accumulates both
    u = [tj.tensor(x, requires_grad=True) for x in arrays[:5]]
    f(*u, u[0]).backward()
    assert taken[-1] is False
    np.testing.assert_allclose(u[0].grad.numpy(), arrays[1] - arrays[4], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape, fn", [
    ((), tj.exp),                                   # the gradient is the output itself
    ((1,), lambda x: tj.exp(x).reshape(())),        # ... or a view of the same value (a guard:
])                                                  # this plan did not share the array)
def test_a_loss_whose_gradient_is_its_output_keeps_the_output(shape, fn):
    # Once the loss plan folds the unit cotangent away, d exp(x)/dx is the loss's own value:
    # the plan returned one array as the output and as the saved gradient, and a backward
    # with a cotangent other than 1 scaled it in place (the caller's y became c * y), or
    # handed it over as the gradient (the caller's y and the gradient shared memory).
    x0 = np.full(shape, 1.25, np.float32)
    want = np.exp(np.float64(1.25))
    f = tj.trace(fn, compile="sync")
    for call in range(2):     # the capture's call and a cache hit
        x = tj.tensor(x0, requires_grad=True)
        y = f(x)
        y0 = float(y.detach())
        np.testing.assert_allclose(y0, want, rtol=1e-6)
        y.backward(tj.tensor(np.float32(0.5)))
        assert float(y.detach()) == y0
        np.testing.assert_allclose(x.grad.numpy(), np.full(shape, 0.5 * want), rtol=1e-6)
        x = tj.tensor(x0, requires_grad=True)
        y = f(x)
        (g,) = tj.autograd.grad([y], [x])
        assert not np.shares_memory(g.numpy(), y.detach().numpy())
        g.mul_(2.0)
        assert float(y.detach()) == y0
        np.testing.assert_allclose(g.numpy(), np.full(shape, 2 * want), rtol=1e-6)


def test_an_output_the_backward_reads_cannot_be_modified_in_place_silently():
    # softmax's backward reads its output: a compiled call returned that same array, and an
    # in-place write to it after the call went into the gradient unseen (0.077 for 0.035 at
    # [0, 0] here); eager raises for its saved output, and so does the compiled call now
    import tracejit.nn.functional as F
    x0 = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    c = tj.tensor(np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32))
    f = tj.trace(lambda x: F.softmax(x, dim=-1), compile="sync")
    for call in range(3):     # the capture's call, then cache hits (the generated call)
        x = tj.tensor(x0, requires_grad=True)
        y = f(x)
        y.mul_(2.0)
        with pytest.raises(InplaceModifiedError, match="output 0 of compiled"):
            (y * c).sum().backward()
        x = tj.tensor(x0, requires_grad=True)       # unmodified: the eager gradient
        (f(x) * c).sum().backward()
        e = tj.tensor(x0, requires_grad=True)
        (F.softmax(e, dim=-1) * c).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), e.grad.numpy(), rtol=1e-5, atol=1e-6)
    # an output the backward does not read (exp recomputes from x) may change: the gradient
    # is that of the changed computation, as eager's would be without its saved output
    g = tj.trace(tj.exp, compile="sync")
    x = tj.tensor(x0, requires_grad=True)
    y = g(x)
    y.mul_(2.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x0), rtol=1e-5)
    # nor does max pooling's backward read its output (a view of the saved record's values
    # half; the scatter reads the offsets half): eager allows the write, and so must this
    p0 = np.random.default_rng(3).standard_normal((2, 3, 4, 4)).astype(np.float32)
    grads = []
    for pool in (lambda t: F.max_pool2d(t, 2), tj.trace(lambda t: F.max_pool2d(t, 2), compile="sync")):
        x = tj.tensor(p0, requires_grad=True)
        y = pool(x)
        y.mul_(2.0)
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)


def test_an_input_read_only_through_a_comparison_gets_no_gradient_as_in_eager():
    import warnings

    def f(a, b):
        return (a > b).float() + b * 2

    a, b = tj.tensor([1.0, -1.0], requires_grad=True), tj.tensor([0.5, 0.5], requires_grad=True)
    f(a, b).sum().backward()
    c, d = tj.tensor([1.0, -1.0], requires_grad=True), tj.tensor([0.5, 0.5], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tj.compile(f, fullgraph=True)(c, d).sum().backward()
    assert a.grad is None and c.grad is None
    np.testing.assert_array_equal(d.grad.numpy(), b.grad.numpy())


def test_create_graph_backward_differentiates_the_graph_once(monkeypatch):
    # a PINN or MAML step differentiates a compiled call's gradient again on every step:
    # the programs it runs (the backward and the values it reads, compiled) are built at the
    # first and kept
    from tracejit.compiler import create_graph, executor
    built = []
    real = executor.split
    for mod in (executor, create_graph):
        monkeypatch.setattr(mod, "split", lambda *a, **k: built.append(1) or real(*a, **k))
    cf = tj.compile(lambda x, w: tj.tanh(x * w).sum())
    want, got = [], []
    for k in range(3):
        for fn, out in ((cf, got), (lambda x, w: tj.tanh(x * w).sum(), want)):
            x = tj.tensor(np.linspace(-1, 1, 8, dtype=np.float32) + k, requires_grad=True)
            w = tj.tensor(np.float32(0.5 + k), requires_grad=True)
            (gx,) = tj.autograd.grad(fn(x, w), [x], create_graph=True)
            (gw,) = tj.autograd.grad((gx ** 2).sum(), [w])
            out.append((gx.detach().numpy(), gw.numpy()))
    for (a, b), (c, d) in zip(got, want):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, d, rtol=1e-5, atol=1e-6)
    assert len(built) == 2   # the backward cut from its forward, then its own training plans


def test_an_input_read_only_through_detach_gets_no_gradient_when_compiled():
    """As in eager mode (and the IR interpreter): None, not zeros (an optimizer skips a None
    gradient but decays a zero one)."""
    torch = pytest.importorskip("torch")
    x0, y0 = np.arange(12.0).reshape(4, 3), np.linspace(-1, 1, 12).reshape(4, 3)
    res = []
    for lib, compiled in ((torch, False), (tj, False), (tj, True)):
        x, y = lib.tensor(x0, requires_grad=True), lib.tensor(y0, requires_grad=True)

        def f(x, y):
            return lib.nn.functional.soft_margin_loss(x, lib.sign(y).detach())
        (tj.trace(f, compile="sync") if compiled else f)(x, y).backward()
        res.append((x.grad.numpy(), y.grad))
    for got in res[1:]:
        np.testing.assert_allclose(got[0], res[0][0], rtol=1e-12)
        assert got[1] is None
