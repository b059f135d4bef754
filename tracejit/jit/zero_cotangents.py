"""A backward graph for a call whose outputs did not all receive a gradient.

A compiled backward takes one cotangent per output; an output nothing differentiated
(an auxiliary value a forward returns beside the loss) gets zeros. That is exact unless
the output's local derivative is infinite: zero times inf is NaN (``sqrt`` at 0), and
the NaN reaches every gradient the output shares a path with, where PyTorch's eager
backward never visits the output. `without_cotangents` gives the backward as PyTorch
computes it: the contributions of those outputs are left out where they join the others
(``add``), so no value derived from their zeros reaches a gradient.

It refuses (None) a graph where such a value meets another in any other way than an
``add``: the caller then keeps the zero-filled backward.
"""
from __future__ import annotations

from typing import Optional

from ..ops.elementwise import ADD
from .ir import Eqn, Graph, Var
from .passes import dce

__all__ = ["without_cotangents"]


def without_cotangents(graph: Graph, cotangents: list, absent: set) -> Optional[Graph]:
    """`graph` (a backward: its inputs include the `cotangents` vars) with the cotangents in
    `absent` left out; None where that is not a matter of dropping terms of sums."""
    dep = set(cotangents)        # values computed from some cotangent
    zero = set(absent)           # values computed from absent cotangents only
    sub: dict = {}               # an add's result -> its present term
    eqns = []
    for e in graph.eqns:
        ins = tuple(sub.get(a, a) if isinstance(a, Var) else a for a in e.inputs)
        from_ct = [a for a in ins if isinstance(a, Var) and a in dep]
        if from_ct:
            dep.update(e.outs)
            absent_ins = [a in zero for a in from_ct]
            if all(absent_ins):
                zero.update(e.outs)
            elif any(absent_ins):
                if e.prim is not ADD or len(from_ct) != 2:
                    return None
                sub[e.outs[0]] = from_ct[absent_ins.index(False)]
                continue
        eqns.append(e if ins == e.inputs else Eqn(e.prim, ins, e.outs, e.params, e.loc))
    outputs = tuple(sub.get(a, a) if isinstance(a, Var) else a for a in graph.outputs)
    return dce(Graph(graph.inputs, tuple(eqns), outputs, graph.name))
