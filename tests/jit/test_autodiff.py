"""Differentiation of captured programs: control flow, custom Functions, higher order,
what the forward saves, and the compiled autograd node.

Every gradient is compared with eager autograd on the same inputs (through
`differential.assert_compiled_matches`, which also runs the IR interpreter).
"""
from __future__ import annotations


import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.autodiff import joint, split
from tracejit.errors import CompileError, GraphFreedError, InplaceModifiedError
from differential import Mismatch, assert_compiled_matches, assert_same
from inputs import T


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")




# --------------------------------------------------------------------------- cond
def branchy(x, y, z):
    if x.sum() > 0:
        out = tj.tanh(x * y)
    else:
        out = x * z - 1.0
    return out * 2.0


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true-branch", "false-branch"])
def test_cond_differentiates_branchwise(sign):
    x = T(3, 4, seed=1, low=0.1)
    x = tj.tensor(x.detach().numpy() * sign).requires_grad_()
    assert_compiled_matches(branchy, x, T(3, 4, seed=2), T(3, 4, seed=3), mode="script")


def test_cond_untaken_branch_inputs_get_none_like_eager():
    cf = tj.script(branchy)
    y, z = T(3, 4, seed=2), T(3, 4, seed=3)
    # (the first branch again last: the answer kept per branch pattern must be its own)
    for sign, used, unused in ((1.0, y, z), (-1.0, z, y), (1.0, y, z), (-1.0, z, y)):
        x = tj.tensor(sign * (np.abs(T(3, 4, seed=1).detach().numpy()) + 0.1)).requires_grad_()
        out = cf(x, y, z)
        gx, gu, gn = tj.autograd.grad(out.sum(), [x, used, unused], allow_unused=True)
        assert gx is not None and gu is not None
        assert gn is None, "an input only the untaken branch reads must get no gradient"
    assert cf.cache_stats()["compiles"] == 1   # one capture serves both branches


def test_cond_with_branch_dependent_shapes_of_grads():
    def f(x, w):
        h = x * w
        if h.mean() > 0:
            h = h.sum(0) * 3.0
        else:
            h = (h * h).sum(0)
        return h
    w = T(5, seed=4)
    assert_compiled_matches(f, T(4, 5, seed=5, low=0.2), w, mode="script")
    assert_compiled_matches(f, tj.tensor(-np.abs(T(4, 5, seed=5).detach().numpy()) - 0.2).requires_grad_(),
                            tj.tensor(np.abs(w.detach().numpy()) + 0.1).requires_grad_(), mode="script")


# --------------------------------------------------------------------------- loops
def test_for_over_static_range_differentiates():
    def f(x, w):
        h = x
        for i in range(3):
            h = tj.tanh(h * w) + h * 0.5
        return h.sum(1)
    assert_compiled_matches(f, T(4, 6, seed=1), T(6, seed=2), mode="script")


def test_while_with_data_dependent_trip_count_refuses_backward_clearly():
    def f(x):
        while x.sum() < 50.0:
            x = x * 2.0
        return x
    cf = tj.script(f)
    x = T(5, seed=1, low=0.1)
    # Without gradients the loop runs compiled and matches eager.
    with tj.no_grad():
        assert_same(cf(x), f(x.detach()), "while forward")
    with pytest.raises(CompileError, match=r"(?s)`while`.*for i in range"):
        cf(x).sum().backward()
    # Eager mode is the documented way out, and works.
    with tj.eager():
        x.grad = None
        cf(x).sum().backward()
    assert x.grad is not None


def test_for_over_a_runtime_scalar_bound_runs_and_refuses_backward_with_advice():
    def f(x, n):
        for i in range(n):
            x = x * 1.5
        return x
    cf = tj.script(f)
    x = T(4, seed=1)
    with tj.no_grad():
        assert_same(cf(x, 3), f(x.detach(), 3), "n=3")
        assert_same(cf(x, 5), f(x.detach(), 5), "n=5")
    assert cf.cache_stats()["compiles"] == 1
    with pytest.raises(CompileError, match=r"trip count is a runtime scalar.*range\(x.shape\[1\]\)"):
        cf(x, 2)


# --------------------------------------------------------------------------- create_graph
def test_create_graph_runs_a_compiled_backward_and_second_derivatives_match():
    def f(x, y):
        return (tj.tanh(x) * y * x).sum()
    x, y = T(3, 4, seed=1), T(3, 4, seed=2)
    cf = tj.trace(f)
    results = []
    for fn in (cf, f):
        xi, yi = (tj.tensor(t.detach().numpy()).requires_grad_() for t in (x, y))
        gx, gy = tj.autograd.grad(fn(xi, yi), [xi, yi], create_graph=True)
        assert gx.requires_grad and gy.requires_grad
        # the gradients come from the backward's own compiled program, differentiable again
        assert (type(gx.grad_fn).__name__ == "CompiledNode") == (fn is cf)
        hxx, hxy = tj.autograd.grad((gx * gx).sum() + gy.sum(), [xi, yi])
        results.append((gx, gy, hxx, hxy))
    for a, e, what in zip(results[0], results[1], ("gx", "gy", "d2/dx", "d2/dy")):
        assert_same(a, e, what)


# --------------------------------------------------------------------------- autograd.grad inside
def _in_function_grads(lib, compiled, create_graph=True):
    """A gradient penalty and a PINN's u_xx taken inside the (compiled) function; the
    parameters' gradients of the result after three calls."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(3)
    w1 = lib.tensor(r.standard_normal((8, 2)).astype(np.float32), requires_grad=True)
    w2 = lib.tensor(r.standard_normal((1, 8)).astype(np.float32), requires_grad=True)

    def f(x):
        u = lib.tanh(x @ w1.t()) @ w2.t()
        (ux,) = lib.autograd.grad(u, x, grad_outputs=lib.ones_like(u), create_graph=True)
        (uxx,) = lib.autograd.grad(ux[:, :1].sum(), x, create_graph=create_graph, retain_graph=True)
        return ((ux.norm(2, dim=1) - 1) ** 2).mean() + (uxx ** 2).mean() + u.mean()
    fn = tj.compile(f, fullgraph=True) if compiled else f
    out = []
    for k in range(3):
        x = lib.tensor(r.standard_normal((5, 2)).astype(np.float32) * (k + 1), requires_grad=True)
        w1.grad = w2.grad = None
        loss = fn(x)
        loss.backward()
        out.append([loss.detach().numpy(), w1.grad.numpy(), w2.grad.numpy(), x.grad.numpy()])
    if compiled:
        assert fn.cache_stats()["compiles"] == 1 and fn.cache_stats()["eager_fallbacks"] == 0
    return out


@pytest.mark.parametrize("create_graph", [True, False])
def test_autograd_grad_inside_a_compiled_function_matches_torch(create_graph):
    import torch
    want = _in_function_grads(torch, False, create_graph)
    for compiled in (False, True):
        for got, ref in zip(_in_function_grads(tj, compiled, create_graph), want):
            for a, b in zip(got, ref):
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)


def test_autograd_grad_inside_a_compiled_function_checks_its_arguments():
    def unused(x, y):
        return tj.autograd.grad((x * 2).sum(), [x, y], create_graph=True)[1]

    def no_grad_input(x, y):
        return tj.autograd.grad((x * y).sum(), y)[0]
    x, y = tj.ones(3, requires_grad=True), tj.ones(3)
    with pytest.raises(RuntimeError, match="input 1 of autograd.grad does not appear"):
        tj.compile(unused, fullgraph=True)(x, tj.ones(3, requires_grad=True))
    with pytest.raises(RuntimeError, match="input 0 does not require grad"):
        tj.compile(no_grad_input, fullgraph=True)(x, y)
    got = tj.compile(lambda a: tj.autograd.grad((a * a).sum(), a)[0], fullgraph=True)(x)
    assert got.tolist() == [2.0, 2.0, 2.0] and not got.requires_grad   # (no create_graph: detached)


def test_autograd_grad_of_an_output_requiring_grad_through_other_tensors_only():
    # as eagerly: the unused input's gradient is None (zeros when materialized), not an error
    w = tj.ones(3, requires_grad=True)

    def f(x):
        z = x.detach().requires_grad_()
        (g,) = tj.autograd.grad((w * 2).sum(), z, allow_unused=True, materialize_grads=True)
        return g + x
    assert tj.compile(f, fullgraph=True)(tj.ones(3)).tolist() == f(tj.ones(3)).tolist() == [1.0, 1.0, 1.0]


# --------------------------------------------------------------------------- custom Function
class TimesThreeDoubleGrad(tj.autograd.Function):
    """Forward 3x; backward deliberately 2x (not the true derivative)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2.0, None


class SquareFn(tj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2.0 * x


def test_custom_function_inside_compiled_uses_its_own_backward():
    def f(x, w):
        return TimesThreeDoubleGrad.apply(tj.tanh(x) * w, 7).sum(1)
    x, w = T(3, 4, seed=1), T(4, seed=2)
    cf = assert_compiled_matches(f, x, w)
    out = cf(x, w)
    gx, gw = tj.autograd.grad(out.sum(), [x, w])
    t = np.tanh(x.detach().numpy())
    wn = w.detach().numpy()
    np.testing.assert_allclose(gx.numpy(), 2.0 * wn * (1 - t * t), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw.numpy(), (2.0 * t).sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy(), (3.0 * t * wn).sum(1), rtol=1e-5, atol=1e-6)


def test_custom_function_with_saved_tensor_matches_eager():
    assert_compiled_matches(lambda x: SquareFn.apply(x * 2.0 + 1.0).mean(), T(5, 3, seed=3))


# --------------------------------------------------------------------------- outputs
def test_output_returned_twice_gets_the_sum_of_its_cotangents():
    # autodiff.joint must not add the cotangents of a repeated output eagerly
    # instead of in the backward graph.
    assert_compiled_matches(lambda x, y: (x * y, x * y), T(3, 4, seed=1), T(3, 4, seed=2))
    assert_compiled_matches(lambda x: (tj.exp(x),) * 3, T(5, seed=3))


def test_input_returned_as_output_and_mixed_outputs():
    def f(x, y):
        a = x * y
        return x, a, a.sum(1), a.amax(0), (a > 0).sum(), 3
    assert_compiled_matches(f, T(3, 4, seed=1), T(3, 4, seed=2))


def test_outputs_not_depending_on_an_input_give_none():
    def f(x, y, k):
        return tj.exp(x) * 2.0, (k > 0).float() * 5.0
    assert_compiled_matches(f, T(3, seed=1), T(3, seed=2), T(3, seed=3, rg=False))


def test_output_requires_grad_only_when_it_depends_on_a_differentiable_input():
    """As in eager: an output computed only from inputs without requires_grad does not
    require grad, and an input returned as-is gets no gradient through the compiled node."""
    def f(x, y):
        return tj.tanh(x), y
    x, y = T(3, seed=1, rg=False), T(3, seed=2)
    a, b = tj.trace(f)(x, y)
    assert b is y
    assert not a.requires_grad and a.grad_fn is None
    def g(x, y):
        return tj.tanh(x) * 2.0, y
    x = T(3, seed=1)
    a, b = tj.trace(g)(x, y)
    (gy,) = tj.autograd.grad(a.sum(), [y], allow_unused=True)
    assert gy is None


def test_integer_and_bool_paths_do_not_get_gradients():
    def f(x, idx):
        return (x * (idx > 1).float()).sum() + x.argmax().float()
    assert_compiled_matches(f, T(6, seed=1), tj.tensor(np.array([0, 1, 2, 3, 2, 1])))


# --------------------------------------------------------------------------- the autograd node
def test_backward_twice_without_retain_graph_raises_graph_freed():
    cf = tj.trace(lambda x: tj.tanh(x * 2.0).sum())
    x = T(4, seed=1)
    out = cf(x)
    out.backward(retain_graph=True)
    out.backward()                              # retained once: works, grads accumulate
    g2 = x.grad.numpy().copy()
    with pytest.raises(GraphFreedError):
        out.backward()
    x2 = tj.tensor(x.detach().numpy()).requires_grad_()
    (tj.tanh(x2 * 2.0).sum() * 2.0).backward()
    np.testing.assert_allclose(g2, x2.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_inplace_modified_input_after_forward_is_refused():
    cf = tj.trace(lambda x, w: (x * w).sum())
    a = T(4, seed=1)
    x = a * 1.0                                 # a non-leaf, so it may be modified in place
    w = T(4, seed=2)
    out = cf(x, w)
    with tj.no_grad():
        x.add_(1.0)
    with pytest.raises(InplaceModifiedError, match="input 0"):
        out.backward()
    assert a.grad is None and w.grad is None


def test_grads_accumulate_into_leaves_like_eager():
    cf = tj.trace(lambda x, w: (tj.sigmoid(x * w) * x).sum())
    x, w = T(3, 5, seed=1), T(5, seed=2)
    xe, we = (tj.tensor(t.detach().numpy()).requires_grad_() for t in (x, w))
    for _ in range(3):
        cf(x, w).backward()
        (tj.sigmoid(xe * we) * xe).sum().backward()
    assert_same(x.grad, xe.grad, "x.grad")
    assert_same(w.grad, we.grad, "w.grad")


# --------------------------------------------------------------------------- joint / split
def _graph(fn, *args):
    cf = tj.trace(fn, compiler="interpret")
    cf(*args)
    return cf._entries[-1].opt_graph


def test_split_recomputes_elementwise_and_saves_matmul_outputs():
    x, w = T(4, 5, seed=1), T(5, 3, seed=2)
    g = _graph(lambda x, w: tj.tanh(x.mm(w)) * 2.0, x, w)
    fwd, bwd, n_saved = split(g, [True, True])
    saved = fwd.outputs[1:]
    assert n_saved == 1 and saved[0] is g.eqns[0].out      # the matmul result, not tanh's
    names = [e.prim.name for e in bwd.eqns]
    assert "tanh" in names and "matmul" in names
    assert len(bwd.inputs) == len(g.inputs) + n_saved + len(g.outputs)


def test_joint_of_inactive_inputs_has_no_gradient_outputs():
    x, y = T(3, seed=1), T(3, seed=2)
    g = _graph(lambda x, y: x * y + 1.0, x, y)
    j = joint(g, [True, False])
    assert len(j.outputs) == 1
    j2 = joint(g, [False, False])
    assert len(j2.outputs) == 0


def test_mismatch_is_reported_with_the_ir():
    """The differential helper itself: a wrong compiled result is caught and shown with IR."""
    x = T(3, seed=1)
    wrong = tj.trace(lambda x: x * 3.0)
    with pytest.raises(Mismatch, match=r"(?s)values differ.*captured IR"):
        assert_compiled_matches(lambda x: x * 2.0, x, compiled=wrong, interpreter=False)


def test_several_outputs_of_one_compiled_call_as_backward_roots():
    # All outputs share one CompiledNode: the engine must count its edges once.
    cf = tj.trace(lambda x, y: (x * y, (x * y).sum(1)))
    x, y = T(3, 4, seed=1), T(3, 4, seed=2)
    a, b = cf(x, y)
    ga, gb = tj.ones(3, 4), tj.ones(3)
    gx, gy = tj.autograd.grad([a, b], [x, y], grad_outputs=[ga, gb], allow_unused=True)
    assert gx is not None and gy is not None
    expect = y.detach().numpy() * 2.0       # d/dx of <xy, 1> + <sum_1(xy), 1>
    np.testing.assert_allclose(gx.numpy(), expect, rtol=1e-6)


def test_split_recomputes_an_explicit_expand_instead_of_saving_it():
    # Saving expand's output would materialize the whole broadcast array for the backward.
    x, b = T(4, 7, seed=1), T(1, 7, seed=2)
    g = _graph(lambda x, b: tj.tanh(x * b.expand(4, 7)).sum(), x, b)
    fwd, bwd, n_saved = split(g, [True, True])
    assert n_saved == 0, [v.aval for v in fwd.outputs[1:]]
    assert_compiled_matches(lambda x, b: tj.tanh(x * b.expand(4, 7)).sum(), x, b)


def _lattice(lib, x):
    """A log-space lattice written cell by cell in place (an RNN-T loss's recursion)."""
    a = lib.zeros(2, 4, 3)
    for t in range(4):
        for u in range(3):
            if t and u:
                a[:, t, u] = lib.logsumexp(lib.stack([a[:, t - 1, u] + x[:, t, u], a[:, t, u - 1] - x[:, t, u]]), 0)
            elif t or u:
                a[:, t, u] = (a[:, t - 1, u] if t else a[:, t, u - 1]) + x[:, t, u]
    return a[:, 3, 2] * a[:, 2, 1]


def test_a_lattice_written_in_place_chains_its_gradient_adds_in_place():
    # each read's gradient adds into the one buffer of its value's cotangent (no zeros per
    # read summed afterwards), and every write comes after the other readers of its target,
    # so a plan may write each in place
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    xt = torch.tensor(x0, requires_grad=True)
    _lattice(torch, xt).sum().backward()
    x = tj.tensor(x0, requires_grad=True)
    fn = tj.compile(lambda x: _lattice(tj, x))
    out = fn(x)
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), _lattice(torch, torch.tensor(x0)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    from tracejit.jit.passes import dce
    from tracejit.ops.creation import FULL
    from tracejit.ops.elementwise import ADD
    from tracejit.ops.indexing import GETITEM
    bwd = dce(split(_graph(lambda x: _lattice(tj, x), x), [True])[1])
    made = {o: e for e in bwd.eqns for o in e.outs}
    writes = [e for e in bwd.eqns if e.prim.extra.get("donates")]
    from_zeros = [e for e in writes if made.get(e.inputs[0]) is not None and made[e.inputs[0]].prim is FULL]
    assert len(writes) > 20 and len(from_zeros) <= 2, (len(writes), len(from_zeros))
    assert not [e for e in bwd.eqns if e.prim is ADD and tuple(e.out.aval.shape) == (2, 4, 3)]
    pos = {id(e): i for i, e in enumerate(bwd.eqns)}
    for e in writes:    # no other reader of the target (or of a view of it) after the write,
        # but one that reads the write's result too (a[:, t, 0] = a[:, t - 1, 0] + ...: the
        # gradient of the read adds g[idx] into the written g)
        later = bwd.eqns[pos[id(e)] + 1:]
        views = {e.inputs[0]} | {d.out for d in bwd.eqns if d.prim is GETITEM and d.inputs[0] is e.inputs[0]}
        readers = [d for d in later if any(a in views for a in d.inputs)]
        assert not readers or any(e.out in d.inputs for d in readers), e
