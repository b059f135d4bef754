"""Fusion structure: which equations share a kernel, what runs as a step, what is saved.

The numeric results of every program here are also checked against eager (a wrong
partition that still "looks fused" must not pass), and every partition is checked to be
a valid schedule: each item's inputs exist before it runs, every equation appears once.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import diskcache
from tracejit.jit.autodiff import split
from tracejit.compiler.fusion import Group, partition
from tracejit.jit.passes import optimize
from differential import assert_compiled_matches, assert_valid_partition, kernel_cache_at
from inputs import T, gelu


pytestmark = pytest.mark.usefixtures("kernels_in_test_cache")




def _program(cf):
    return cf._entries[-1].executor


def _groups(plan):
    return [it for it in plan.items if isinstance(it, Group)]


def _steps(plan):
    return [it for it in plan.items if not isinstance(it, Group)]


def _train(cf):
    prog = _program(cf)
    assert len(prog._train) == 1, "expected one training variant"
    return next(iter(prog._train.values()))


check_schedule = assert_valid_partition


# --------------------------------------------------------------------------- GELU
def test_gelu_is_one_kernel_forward_and_one_backward_with_nothing_saved():
    x, y, z = T(64, seed=1), T(64, seed=2), T(64, seed=3)
    cf = assert_compiled_matches(gelu, x, y, z)
    fwd, bwd, n_saved = _train(cf)
    for plan in (fwd, bwd):
        check_schedule(plan.items, plan.graph)
        assert _steps(plan) == [], plan.describe()
        assert len(_groups(plan)) == 1, plan.describe()
    (g,) = _groups(fwd)
    assert [e.prim.name for e in g.eqns].count("tanh") == 1 and len(g.eqns) == 10
    assert len(g.inputs) == 3 and len(g.outputs) == 1          # reads x, y, z; writes the result
    (gb,) = _groups(bwd)
    assert "tanh" in [e.prim.name for e in gb.eqns]            # recomputed in the backward kernel
    assert n_saved == 0
    assert len(fwd.graph.outputs) == 1                         # the forward returns nothing extra
    text = str(cf.explain(x, y, z))
    assert "0 values, 0 bytes" in text
    # Inference (no grad) is the same single kernel.
    with tj.no_grad():
        cf(x, y, z)
    infer = _program(cf).infer_plan()
    assert len(_groups(infer)) == 1 and _steps(infer) == []
    assert len(infer.kernel_sources()) == 1


def test_gelu_kernel_counts_one_per_plan():
    x, y, z = T(4, 5, seed=1), T(4, 5, seed=2), T(4, 5, seed=3)
    cf = tj.trace(gelu)
    out = cf(x, y, z)
    out.backward(T(4, 5, seed=9, rg=False))  # a contiguous cotangent: one layout
    fwd, bwd, _ = _train(cf)
    assert len(fwd.kernel_sources()) == 1
    assert len(bwd.kernel_sources()) == 1
    np.testing.assert_allclose(out.detach().numpy(), gelu(x, y, z).detach().numpy(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- losses
def test_squared_error_loss_is_one_kernel(monkeypatch):
    # The ordinary split (TRACEJIT_LOSS_GRADS=0): a forward kernel, a backward kernel.
    monkeypatch.setenv("TRACEJIT_LOSS_GRADS", "0")
    p, y = T(32, 3, seed=1), T(32, 3, seed=2, rg=False)
    cf = assert_compiled_matches(lambda p, y: (p - y).pow(2).sum(), p, y)
    fwd, bwd, n_saved = _train(cf)
    (g,) = fwd.items                     # nothing else runs: one pass over memory
    assert isinstance(g, Group)
    assert [e.prim.name for e in g.eqns] == ["sub", "pow"]
    assert g.reduction is not None and g.reduction.prim.name == "sum"
    assert g.outputs == [g.reduction.out]  # the squared differences are never written
    assert n_saved == 0
    (spec,) = fwd.kernel_specs()
    nest = spec.nest                     # the sum is computed in the kernel, over every dim
    assert [st.prim.name for st in nest.steps] == ["sub", "pow"] and nest.outputs == ()
    assert nest.reduction.full and nest.reduction.combine == "add" and nest.reduction.value == "v1"
    # Backward: one elementwise kernel, reading the 0-d cotangent as it is (no step).
    assert len(_groups(bwd)) == 1
    assert [s.prim.name for s in _steps(bwd)] == []
    with tj.no_grad():
        cf(p, y)
    infer = _program(cf).infer_plan()
    assert len(infer.items) == 1 and isinstance(infer.items[0], Group)


def test_loss_and_its_gradient_are_one_kernel():
    # By default a loss's forward computes its gradient (for a cotangent of 1) in the same
    # kernel: p and y are read once; the loss and dloss/dp are written; no backward plan.
    p, y = T(32, 3, seed=1), T(32, 3, seed=2, rg=False)
    cf = assert_compiled_matches(lambda p, y: (p - y).pow(2).sum(), p, y)
    fwd, bwd, n_saved = _train(cf)
    assert bwd is None and n_saved == 1
    (g,) = _groups(fwd)
    assert g.reduction is not None and g.reduction.prim.name == "sum"
    assert [e.prim.name for e in g.eqns][:2] == ["sub", "pow"]
    assert len(g.outputs) == 2 and g.reduction.out in g.outputs  # the loss and dp
    assert {v.aval.shape for v in g.inputs} == {(32, 3), ()}  # p, y and the unit cotangent
    # The only step makes the 0-d cotangent 1 (no array work).
    assert [s.prim.name for s in _steps(fwd)] == ["full"]
    assert len(fwd.kernel_sources()) == 1
    check_schedule(fwd.items, fwd.graph)
    text = str(cf.explain(p, y))
    assert "gradients for a cotangent of 1" in text


def test_loss_gradient_scaled_by_the_cotangent_and_retained_graphs_stay_intact():
    p, y = T(16, seed=1), T(16, seed=2, rg=False)
    cf = tj.trace(lambda p, y: ((p - y) ** 2).sum())
    want = 2 * (p.detach().numpy() - y.numpy())
    loss = cf(p, y)
    loss.backward(tj.tensor(np.float32(3.0)), retain_graph=True)
    np.testing.assert_allclose(p.grad.numpy(), 3 * want, rtol=1e-6)
    p.grad.mul_(0)                       # the user changes .grad in place...
    loss.backward(retain_graph=True)     # ...the retained gradient is not affected
    np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-6)
    loss.backward()
    np.testing.assert_allclose(p.grad.numpy(), 2 * want, rtol=1e-6)
    with pytest.raises(Exception, match="(?i)freed|second time|retain_graph"):
        loss.backward()


def _two_layer_step_compiled():
    """The two-layer training loss, compiled and checked against eager."""
    x, y = T(16, 10, seed=1, rg=False), T(16, 3, seed=2, rg=False)
    w1, w2 = T(10, 6, seed=3), T(6, 3, seed=4)

    def step(x, w1, w2, y):
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
    return assert_compiled_matches(step, x, w1, w2, y)


def test_two_layer_step_matmuls_are_steps_elementwise_is_fused(monkeypatch):
    monkeypatch.setenv("TRACEJIT_LOSS_GRADS", "0")  # the forward/backward split
    cf = _two_layer_step_compiled()
    fwd, bwd, _ = _train(cf)
    kinds = [("group", tuple(e.prim.name for e in it.eqns), it.reduction and it.reduction.prim.name)
             if isinstance(it, Group) else ("step", it.prim.name) for it in fwd.items]
    assert kinds == [("step", "matmul"), ("group", ("clamp",), None), ("step", "matmul"),
                     ("group", ("sub", "pow"), "sum")]
    for plan in (fwd, bwd):
        check_schedule(plan.items, plan.graph)
        for s in _steps(plan):
            assert s.prim.kind != "elementwise", f"{s.prim.name} ran as a step:\n{plan.describe()}"
            assert s.prim.name in ("matmul", "permute", "reshape"), plan.describe()
    assert sum(s.prim.name == "matmul" for s in _steps(bwd)) == 3  # dW2, dH, dW1 (no dx)
    # The relu mask and the gradient's elementwise work share kernels with their neighbours.
    assert len(_groups(bwd)) <= 3, bwd.describe()


def test_two_layer_step_with_its_gradients_is_one_plan():
    cf = _two_layer_step_compiled()
    fwd, bwd, n_saved = _train(cf)
    assert bwd is None and n_saved == 2                      # dW1, dW2
    check_schedule(fwd.items, fwd.graph)
    assert sum(s.prim.name == "matmul" for s in _steps(fwd)) == 5  # 2 forward, dW2, dH, dW1
    # The loss and its gradient dY = 2 (Y - y) are one kernel; the relu mask another.
    kinds = [(tuple(e.prim.name for e in g.eqns), g.reduction and g.reduction.prim.name) for g in _groups(fwd)]
    assert kinds[0] == (("clamp",), None) and kinds[1][1] == "sum" and kinds[1][0][:2] == ("sub", "pow")
    assert len(kinds) == 3, fwd.describe()


def test_schedule_runs_the_earliest_ready_item_first_and_refuses_a_missing_value():
    # Given in reverse, independent chains come out in their given order, each equation
    # as soon as its inputs exist; an item whose input nothing makes is refused.
    from tracejit.compiler.fusion import _schedule
    from tracejit.jit.ir import Var
    x = T(8, seed=1)
    cf = assert_compiled_matches(lambda x: (x.exp() + 1, x.sin() * 2), x, grads=False)
    graph = _program(cf).graph
    eqns = list(graph.eqns)
    got = _schedule(eqns[::-1], graph)
    produced, want, pending = set(graph.inputs), [], eqns[::-1]
    while pending:   # (the definition: the first pending item whose inputs exist)
        it = next(e for e in pending if all(a in produced for a in e.inputs if isinstance(a, Var)))
        want.append(it)
        pending.remove(it)
        produced.update(it.outs)
    assert [id(e) for e in got] == [id(e) for e in want] and len(got) == len(eqns)
    with pytest.raises(RuntimeError, match="cyclic schedule"):
        _schedule(eqns[1:], graph)


# --------------------------------------------------------------------------- softmax / layer_norm
def _names(g):
    return [e.prim.name for e in g.eqns]


def test_softmax_is_one_rows_group_each_way():
    # softmax and its gradient are primitives (ops/softmax_prim.py); a compiled plan
    # schedules each as its record's rows form (compiler/rowinline.py): one rows group
    # forward (it saves its output), one backward.
    x = T(6, 9, seed=1)
    cf = assert_compiled_matches(lambda x: tj.softmax(x, -1), x)
    fwd, bwd, n_saved = _train(cf)
    for plan in (fwd, bwd):
        check_schedule(plan.items, plan.graph)
        assert not _steps(plan), plan.describe()
        groups = _groups(plan)
        assert len(groups) == 1 and groups[0].rows, plan.describe()
    assert [r.prim.name for r in _groups(fwd)[0].rows] == ["amax", "sum"]
    assert n_saved == 1 and tuple(fwd.graph.outputs[1].aval.shape) == (6, 9)


def test_layer_norm_is_one_rows_group_forward_one_step_backward():
    # LayerNorm's forward and its backward (dx, dweight, dbias stacked) are primitives
    # (ops/layer_norm_prim.py); a plan schedules the forward as its rows form
    # (compiler/rowinline.py), one rows group saving its output; the backward is one
    # step, its three results views.
    x, w, b = T(6, 9, seed=1), T(9, seed=2), T(9, seed=3)
    cf = assert_compiled_matches(lambda x, w, b: tj.layer_norm(x, (9,), w, b), x, w, b)
    fwd, bwd, n_saved = _train(cf)
    for plan in (fwd, bwd):
        check_schedule(plan.items, plan.graph)
        assert all(s.prim.kind != "elementwise" for s in _steps(plan)), plan.describe()
    assert not _steps(fwd) and len(_groups(fwd)) == 1 and _groups(fwd)[0].rows, fwd.describe()
    assert [r.prim.name for r in _groups(fwd)[0].rows] == ["sum", "sum"]
    names = [s.prim.name for s in _steps(bwd)]
    assert names.count("layer_norm_backward") == 1 and not _groups(bwd), bwd.describe()
    assert set(names) <= {"layer_norm_backward", "getitem", "reshape"}, names


# --------------------------------------------------------------------------- partition itself
def test_group_level_cycle_is_refused():
    """Group A (rows) feeds group B (full tiles) through one member, B's row-sum epilogue is
    then combined with A's values: joining that product into A would make A and B wait for
    each other. (This is the shape of layer_norm's backward.)"""
    def f(x, v):
        r = tj.rsqrt(v + 1.0)                   # (4, 1), group A
        m = x * 2.0                             # (4, 7), group B
        p = m * r                               # B reads A
        s = (m * x).sum(1, keepdim=True)        # B's epilogue
        u = s * (r * r)                         # (4, 1): r * r joins A; u must not
        return p, u
    x, v = T(4, 7, seed=1), T(4, 1, seed=2)
    v = tj.tensor(np.abs(v.detach().numpy())).requires_grad_()
    cf = assert_compiled_matches(f, x, v)
    g = cf._entries[-1].opt_graph
    check_schedule(partition(g), g)


def test_layer_norm_backward_partitions():
    x, w, b = T(4, 7, seed=1), T(7, seed=2), T(7, seed=3)
    cf = tj.trace(lambda x, w, b: tj.layer_norm(x, (7,), w, b), compiler="interpret")
    cf(x, w, b)
    g = cf._entries[-1].opt_graph
    _, bwd, _ = split(g, [True, True, True])
    bwd = optimize(bwd)
    check_schedule(partition(bwd), bwd)


def test_broadcast_operands_fuse_into_one_group():
    def f(a, b, c):
        return tj.exp(a * b) + c               # (4,1) * (1,5) + (5,) -> (4, 5)
    cf = assert_compiled_matches(f, T(4, 1, seed=1), T(1, 5, seed=2), T(5, seed=3))
    fwd = _train(cf)[0]
    assert len(_groups(fwd)) == 1 and _steps(fwd) == []
    (g,) = _groups(fwd)
    assert len(g.inputs) == 3                  # each operand read in place, broadcast by indexing
    (spec,) = fwd.kernel_specs()
    # (4,1) follows iteration dim 0, broadcast on dim 1; (1,5) the other way; (5,) dim 1
    assert [op.index for op in spec.nest.operands] == [(0, None), (None, 1), (1,)]
    assert spec.nest.layouts == ("ndc", "ndc", "ndc") and not spec.nest.flat


def test_expand_only_an_index_reads_stays_a_view_step():
    """Informer's sampled keys: an expand read only by advanced indexing is not
    materialized by a kernel (a copy the size of the broadcast); one an elementwise op
    reads still fuses as a broadcasting read."""
    idx = tj.tensor(np.array([[0, 2], [1, 1], [3, 0]]))

    def f(k):
        big = k.unsqueeze(-3).expand(2, 3, 4, 5)
        return big[:, tj.arange(3).unsqueeze(1), idx, :].sum(-1) * 2.0
    cf = assert_compiled_matches(f, T(2, 4, 5, seed=1))
    fwd = _train(cf)[0]
    check_schedule(fwd.items, fwd.graph)
    assert "expand" in [e.prim.name for e in _steps(fwd)], fwd.describe()
    assert not any(e.prim.name == "expand" for g in _groups(fwd) for e in g.eqns), fwd.describe()
    cf = assert_compiled_matches(lambda a, b: a.expand(4, 5) * b, T(4, 1, seed=1), T(4, 5, seed=2))
    assert [e.prim.name for e in _steps(_train(cf)[0])] == []
    # an expanded index (a gather's usual idiom) and expanded values written by index_put
    pos, rows = tj.tensor(np.array([[2, 0], [1, 1]])), tj.tensor(np.array([1, 0]))

    def g(x, v):
        y = x.gather(1, pos.unsqueeze(-1).expand(-1, -1, 4))
        return y.index_put((rows,), v.expand(2, 2, 4)) * 3.0
    assert_compiled_matches(g, T(2, 3, 4, seed=3), T(1, 1, 4, seed=4))


def test_value_used_outside_is_written_once_and_reused():
    def f(x):
        a = tj.tanh(x * 3.0)
        return a * 2.0, a.sum()                 # a feeds an output, a reduction and the backward
    cf = assert_compiled_matches(f, T(5, 6, seed=1))
    fwd = _train(cf)[0]
    check_schedule(fwd.items, fwd.graph)
    assert len(_groups(fwd)) <= 2 and _steps(fwd) == [], fwd.describe()


def test_partition_without_reduction_fusion_runs_reductions_as_steps():
    cf = tj.trace(lambda p, y: (p - y).pow(2).sum(), compiler="interpret")
    cf(T(3, 4, seed=1), T(3, 4, seed=2))
    g = cf._entries[-1].opt_graph
    items = partition(g, fuse_reductions=False)
    check_schedule(items, g)
    assert [it.prim.name for it in items if not isinstance(it, Group)] == ["sum"]


# --------------------------------------------------------------------------- generated kernels
def _compiled_kernels(plan):
    return [fn for k in plan.kernels for fn in k.variants.values()]


def test_float32_kernels_stay_float32():
    """No float64 anywhere in a float32 elementwise kernel: constants are typed, the
    transcendental is the float32 one (a silent promotion would show as fpext/double)."""
    x = T(8, seed=1, rg=False)
    # numba cannot show the LLVM of code it loaded from a cache: compile here.
    diskcache.clear_memory_cache()
    with kernel_cache_at(None):
        cf = tj.trace(gelu)
        cf(x, x, x)
    plan = _program(cf).infer_plan()
    src = plan.kernel_sources()[0]
    assert "tanh_f32" in src and "np.float32(0.5)" in src
    for fn in _compiled_kernels(plan):
        (llvm,) = fn.inspect_llvm().values()
        assert re.search(r"fmul (fast )?float", llvm), "no float32 arithmetic: not the kernel's LLVM"
        assert "fpext" not in llvm and "double" not in llvm


def test_generated_sources_are_in_linecache_and_explain_names_groups_and_lines():
    import inspect
    import linecache
    x = T(8, seed=1, rg=False)
    cf = tj.trace(gelu)
    cf(x, x, x)
    plan = _program(cf).infer_plan()
    (fn,) = _compiled_kernels(plan)
    fname = fn.py_func.__code__.co_filename
    assert "".join(linecache.getlines(fname)) == plan.kernel_sources()[0]
    assert "def kernel(" in inspect.getsource(fn.py_func)
    assert "def plan(" in "".join(linecache.getlines(plan.fn.__code__.co_filename))
    lines, first = inspect.getsourcelines(gelu)
    a_line = first + next(i for i, ln in enumerate(lines) if "a = x * y + z" in ln)
    ret_line = first + next(i for i, ln in enumerate(lines) if ln.strip().startswith("return"))
    where = os.path.basename(gelu.__code__.co_filename)
    text = str(cf.explain(x, x, x))
    assert re.search(rf"group 0: mul, add, mul, pow, mul, add, mul, tanh, add, mul  "
                     rf"\[{where}:{a_line}, {where}:{ret_line}\]", text), text
    assert "\"\"\"fused group: " in text and "tanh_f32(" in text      # the kernel source itself


def test_a_dynamic_size_as_a_parameter_is_read_on_each_call():
    """``clamp(max=n - 1)`` of a dynamic size runs as a step: a kernel would keep the value
    of the call that captured it."""
    cf = tj.trace(lambda x, y: (y * 2).clamp(max=x.shape[0] - 1), compile="sync", dynamic=True)
    y = np.arange(12, dtype=np.float32)
    for n in (6, 4, 9):
        got = cf(tj.tensor(np.zeros(n, np.float32)), tj.tensor(y)).numpy()
        np.testing.assert_array_equal(got, np.minimum(y * 2, n - 1))
    assert len(cf._entries) == 1


def test_a_lone_reduction_of_an_input_stays_in_its_group_when_asked():
    """``g - exp(y) * sum(g)`` (log_softmax's backward): by default the sum of the input g
    runs as a step and the elementwise work as a group; ``lone_rows=True`` (a primitive's
    rows form) keeps the sum in one rows group with it; a sum alone stays a rows group."""
    from tracejit import dtypes
    from tracejit.autograd.grad_mode import enable_grad
    from tracejit.jit.tracer import trace_graph
    from tracejit.ops.elementwise import exp
    from tracejit.ops.reductions import sum as rsum
    from tracejit.ops.registry import Aval
    with enable_grad():
        ctx, out = trace_graph(lambda g, y: g - exp(y) * rsum(g, -1, keepdim=True),
                               [Aval((4, 5), dtypes.float32)] * 2)
    graph = ctx.graph([out._var])
    split_items = partition(graph)
    assert len(split_items) == 2 and not isinstance(split_items[0], Group)
    (one,) = partition(graph, lone_rows=True)
    assert isinstance(one, Group) and [e.prim.name for e in one.rows] == ["sum"]
    assert sorted(e.prim.name for e in one.eqns) == ["exp", "mul", "sub"]
    with enable_grad():
        ctx, out = trace_graph(lambda g: rsum(g, -1, keepdim=True), [Aval((4, 5), dtypes.float32)])
    graph = ctx.graph([out._var])
    assert not isinstance(partition(graph)[0], Group)
    (alone,) = partition(graph, lone_rows=True)
    assert isinstance(alone, Group) and [e.prim.name for e in alone.rows] == ["sum"] and not alone.eqns
