"""Compiled plans schedule a primitive that has a rows form as that form.

softmax, its backward and LayerNorm are primitives (an eager call is one op, its numpy
form a few passes in place), and their records give their *rows form*
(``extra["rows_form"]``: the same function written with keepdim reductions over the last
dim and elementwise ops) with ``extra["rows_inline"]``, the test of an equation's operand
avals and params that says the form applies (softmax: over the last dim; LayerNorm: over
the last dim only, so a bias add or residual before it and a GELU after it join its rows
group). Before a plan is partitioned, each
such equation is replaced by its form's equations, traced over the equation's operand
avals, so the scheduler (fusion.py) makes it a rows group with the elementwise work
around it: ``softmax(q @ k.T * c + mask)``'s scale and mask are computed per row in the
softmax's kernel, and a backward's incoming gradient in its backward's. The eager
primitive's CPU kernel is rendered from the same form (cpu/kernels/row_forms.py), so
eager and compiled run one lowering, on every backend that renders rows groups.
"""
from __future__ import annotations

from ..jit.ir import Eqn, Graph, Literal, Var

__all__ = ["expand_rows_forms", "inlined"]


def expand_rows_forms(graph: Graph) -> Graph:
    """`graph` with each equation whose primitive's rows form applies replaced by the
    form's equations (the last one writing the equation's own output); `graph` itself
    when none applies."""
    if not any(e.prim.extra.get("rows_inline") is not None for e in graph.eqns):
        return graph
    eqns: list = []
    changed = False
    for e in graph.eqns:
        sub = _form(e)
        if sub is None:
            eqns.append(e)
            continue
        changed = True
        env = dict(zip(sub.inputs, e.inputs))
        last = sub.outputs[0]
        for se in sub.eqns:
            ins = tuple(env.get(a, a) if isinstance(a, Var) else a for a in se.inputs)
            eqns.append(Eqn(se.prim, ins, tuple(e.out if o is last else o for o in se.outs),
                            se.params, e.loc))
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.name) if changed else graph


def inlined(e: Eqn) -> bool:
    """Whether plans schedule `e` as its primitive's rows form (its test says it applies)."""
    applies = e.prim.extra.get("rows_inline")
    return (applies is not None and len(e.outs) == 1 and not any(isinstance(a, Literal) for a in e.inputs)
            and bool(applies(*[a.aval for a in e.inputs], **e.params)))


def _form(e: Eqn):
    """The traced rows form of `e` (a graph over `e`'s operands with one output of `e`'s
    aval), or None: no form, it does not apply, or it does not trace to one."""
    if not inlined(e):
        return None
    avals = [a.aval for a in e.inputs]
    from ..jit.tracer import trace_graph
    form = e.prim.extra["rows_form"]
    try:
        ctx, out = trace_graph(lambda *xs: form(*xs, **e.params), avals)
        sub = ctx.graph([out._var])
    except Exception:   # (a form that does not trace here: the primitive stays a step)
        return None
    o = sub.outputs[0]
    if (len(sub.inputs) != len(avals) or not sub.eqns or o in sub.inputs
            or tuple(o.aval.shape) != tuple(e.out.aval.shape) or o.aval.dtype is not e.out.aval.dtype):
        return None
    return sub
