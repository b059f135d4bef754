"""The reference interpreter: runs a Graph by calling each primitive's eager implementation.

It is the meaning of the IR: the compiled path is tested against it. Running through
``bind`` also records the ordinary autograd graph, so gradients through an
interpreted program are exactly the eager ones.

`straight_line` is the same interpreter unrolled for one graph: one generated Python
function whose body is the graph's equations as ``bind`` calls on local variables, so a
call pays no per-equation lookups (the environment dict, the operand reads, the
parameter checks). Tier 0 (compiler/tiers.py) runs it: the digits MLP's forward, 11
equations, took 40 us more than the eager forward through `interpret`.
"""
from __future__ import annotations

import numpy as np

from ..errors import TracejitError, generated_source_name, note_user_line, register_source_lines
from ..device import CPU
from ..ops.eager import bind
from ..ops.host_steps import HOST_STEP, size_bindings, step_function
from ..tensor import Tensor
from ..shapes import Sym, contains_sym
from .control import COND, CUSTOM_FUNCTION, SCAN, WHILE
from .ir import Graph, Literal

__all__ = ["interpret", "straight_line", "bind_symbols", "eval_params", "last_uses"]

_PY_SCALARS = (bool, int, float)


def bind_symbols(graph: Graph, args) -> dict:
    env: dict = {}
    for v, a in zip(graph.inputs, args):
        if v.size is not None:   # an int argument used as a size
            env[v.size] = int(a)
        for d, actual in zip(v.aval.shape, getattr(a, "shape", ())):
            if isinstance(d, Sym) and len(d.terms) == 1 and d.terms[0][1] == 1 and len(d.terms[0][0]) == 1:
                env[d.terms[0][0][0]] = int(actual)
    return env


def _eval(v, syms):
    if isinstance(v, Sym):
        return v.evaluate(syms)
    if isinstance(v, tuple):
        return tuple(_eval(x, syms) for x in v)
    if isinstance(v, dict):
        return {k: _eval(x, syms) for k, x in v.items()}
    return v


def eval_params(params: dict, syms: dict) -> dict:
    return {k: (v if isinstance(v, Graph) else _eval(v, syms)) for k, v in params.items()}


def run_step(e, vals, syms: dict) -> list:
    """`e` (a `HOST_STEP`) on tensors `vals`, binding its sizes in `syms` (the interpreter's)."""
    kw = eval_params({k: v for k, v in e.params.items() if k not in ("fn", "avals")}, syms)
    arrays = step_function(e.params["fn"])(vals[0]._xp(), *(v._data for v in vals), **kw)
    for s, i, j in size_bindings(e):
        syms[s] = arrays[i].shape[j]
    return [Tensor._wrap(a, o.aval.dtype, o.aval.device) for a, o in zip(arrays, e.outs)]


def interpret(graph: Graph, args, syms: dict | None = None, record=None) -> list:
    """Run `graph` on `args` (Tensors / numbers). `record(eqn, outs)` observes each step.
    Every value lives until the graph ends (`straight_line` lets each go after its last
    use, and runs `steps` in place of primitives)."""
    env: dict = {}
    for v, a in zip(graph.inputs, args):
        # (a runtime scalar argument: a 0-d tensor of the dtype the graph typed it with, so
        # every primitive, cast included, can take it)
        env[v] = _scalar_input(a, v.aval.dtype) if type(a) in _PY_SCALARS else a
    if syms is None:
        syms = bind_symbols(graph, args) if graph.symbols else {}

    def read(a):
        if isinstance(a, Literal):
            v = a.value
            return v.evaluate(syms) if type(v) is Sym else v
        return env[a]

    try:
        for e in graph.eqns:
            vals = [read(a) for a in e.inputs]
            params = e.params
            if syms and any(contains_sym(p) for p in params.values()):
                params = eval_params(params, syms)
            if e.prim.kind == "control":
                outs = _CONTROL[e.prim](e, vals, syms)
            elif e.prim is HOST_STEP:
                outs = run_step(e, vals, syms)
            else:
                outs = [bind(e.prim, *vals, **params)]
            for o, val in zip(e.outs, outs):
                env[o] = val
            if record is not None:
                record(e, outs)
    except TracejitError as exc:   # (the innermost graph's equation: its user line)
        note_user_line(exc, e.loc, graph.name)
        raise
    return [read(a) for a in graph.outputs]


def straight_line(graph: Graph, drops=None, steps=None):
    """``run(args) -> outputs``: `interpret` for `graph` (no `record`) generated as one
    Python function. The same ``bind`` calls in the same order: the same values and the
    same autograd graph. `drops` (from `last_uses(graph)`) lets each value go after its
    last use, as eager code's temporaries do. `steps` maps an equation's index to
    ``fn(vals, state) -> outs`` run in place of its primitive (same values; `state` is one
    dict per call), e.g. to give its outputs the autograd graph eager code makes."""
    ns: dict = {"BIND": bind, "SCALAR": _scalar_input, "EVAL": eval_params, "SYMS": bind_symbols,
                "GRAPH": graph, "PY": _PY_SCALARS, "HOST": run_step}
    names: dict = {}
    symbolic = bool(graph.symbols) or any(e.prim is HOST_STEP for e in graph.eqns)

    def name_of(v):
        n = names.get(v)
        if n is None:
            n = names[v] = f"v{len(names)}"
        return n

    def const(value, prefix):
        k = f"{prefix}{len(ns)}"
        ns[k] = value
        return k

    def operand(a):
        if isinstance(a, Literal):
            v = a.value
            return f"{const(v, 'S')}.evaluate(syms)" if type(v) is Sym else const(v, "L")
        return name_of(a)

    body, items = ["def run(args):"], {}
    ins = [name_of(v) for v in graph.inputs]
    if ins:
        body.append(f"    {', '.join(ins)}{',' if len(ins) == 1 else ''} = args")
    for v, n in zip(graph.inputs, ins):
        if v.aval.shape == ():   # (a runtime scalar argument arrives as a Python number)
            body.append(f"    if type({n}) in PY: {n} = SCALAR({n}, {const(v.aval.dtype, 'D')})")
    body.append("    syms = SYMS(GRAPH, args)" if symbolic else "    syms = {}")
    if steps:
        body.append("    state = {}")
    for i, e in enumerate(graph.eqns):
        vals = ", ".join(operand(a) for a in e.inputs)
        outs = ", ".join(name_of(o) for o in e.outs) + ","
        if steps is not None and i in steps:
            body.append(f"    {outs} = {const(steps[i], 'F')}([{vals}], state)")
        elif e.prim.kind == "control" or e.prim is HOST_STEP:
            run = const(_CONTROL[e.prim], 'C') if e.prim.kind == "control" else "HOST"
            body.append(f"    {outs} = {run}({const(e, 'E')}, [{vals}], syms)")
        else:
            params = e.params
            if symbolic and any(contains_sym(p) for p in params.values()):
                kw = f"**EVAL({const(params, 'K')}, syms)"
            else:
                kw = f"**{const(params, 'K')}" if params else ""
            args = ", ".join(x for x in (const(e.prim, "P"), vals, kw) if x)
            body.append(f"    {name_of(e.outs[0])} = BIND({args})")   # (one output: `interpret`)
        items[len(body)] = e
        if drops is not None and drops[i]:
            body.append(f"    del {', '.join(name_of(v) for v in drops[i])}")
    body.append(f"    return [{', '.join(operand(a) for a in graph.outputs)}]")
    fname = generated_source_name("tier0", graph.name)
    exec(compile("\n".join(body), fname, "exec"), ns)
    register_source_lines(ns["run"], fname, items, graph.name)
    return ns["run"]


def _scalar_input(a, dtype):
    return Tensor._wrap(np.asarray(a, dtype=dtype.np), dtype, CPU)


def last_uses(graph: Graph) -> list:
    """Per equation of `graph`, the values (Vars in the interpreter's env) no later
    equation nor the outputs read: `straight_line(..., drops=)` lets them go there."""
    keep = {a for a in graph.outputs if not isinstance(a, Literal)}
    last: dict = {v: -1 for v in graph.inputs}   # an unread input goes before the first
    for i, e in enumerate(graph.eqns):
        for a in e.inputs:
            if not isinstance(a, Literal):
                last[a] = i
        for o in e.outs:
            last[o] = i
    drops: list = [[] for _ in graph.eqns]
    for v, i in last.items():
        if v not in keep and i >= 0:
            drops[i].append(v)
    return drops


def _run_cond(e, vals, syms):
    pred = vals[0]
    branch = e.params["true_graph"] if bool(pred.item()) else e.params["false_graph"]
    return interpret(branch, vals[1:], syms)


def _run_while(e, vals, syms):
    cg, bg = e.params["cond_graph"], e.params["body_graph"]
    n = len(e.outs)
    carried, captured = list(vals[:n]), list(vals[n:])
    while bool(interpret(cg, carried + captured, syms)[0].item()):
        carried = interpret(bg, carried + captured, syms)
    return carried


def _run_custom(e, vals, syms):
    cls = e.params["fn_cls"]
    args = list(vals[:e.params["n_args"]])
    for pos, value in e.params["static_args"]:
        args.insert(pos, value)
    out = cls.apply(*args)
    plain = {pos for pos, _ in e.params.get("static_outs", ())}   # (constants of the capture)
    return [o for j, o in enumerate(out if isinstance(out, tuple) else (out,)) if j not in plain]


def _run_scan(e, vals, syms):
    from ..ops import stack, zeros
    from .loops import unbind_steps
    bg = e.params["body_graph"]
    nc, nx = e.params["n_carry"], e.params["n_xs"]
    length = vals[0]
    n = int(length.item()) if isinstance(length, Tensor) else int(length)
    carry, xs, consts = list(vals[1:1 + nc]), vals[1 + nc:1 + nc + nx], list(vals[1 + nc + nx:])
    steps = range(n - 1, -1, -1) if e.params["reverse"] else range(n)
    ys: dict = {}
    slices = [unbind_steps(x) if isinstance(x, Tensor) else x for x in xs]   # one backward node per xs
    for k in steps:
        out = interpret(bg, [k] + carry + [x[k] for x in slices] + consts, syms)
        carry = list(out[:nc])
        ys[k] = out[nc:]
    stacked = []
    for j, o in enumerate(e.outs[nc:]):
        if n:
            stacked.append(stack([ys[k][j] for k in range(n)]))
        else:
            shape = tuple(d.evaluate(syms) if isinstance(d, Sym) else d for d in o.aval.shape)
            stacked.append(zeros(shape, dtype=o.aval.dtype))
    return carry + stacked


_CONTROL = {COND: _run_cond, WHILE: _run_while, SCAN: _run_scan, CUSTOM_FUNCTION: _run_custom}
