"""Compiled plans schedule a primitive that has a rows form as that form.

softmax, its backward and LayerNorm are primitives whose records give a *rows form*
(``extra["rows_form"]``, keepdim reductions over the last dim and elementwise ops) and a
test for when it applies (``extra["rows_inline"]``). Before partitioning, each such
equation is replaced by its form's equations, so fusion makes one rows group with the work
around it (the scale and mask of ``softmax(q @ k.T * c + mask)``). The eager kernel is
rendered from the same form (cpu/kernels/row_forms.py): one lowering.
"""
from __future__ import annotations

from ..jit.ir import Eqn, Graph, Literal, Var

__all__ = ["expand_rows_forms", "inlined"]


def expand_rows_forms(graph: Graph) -> Graph:
    """`graph` with each equation whose rows form applies replaced by the form's equations;
    `graph` itself when none applies."""
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
