"""What a compiled forward saves for its backward: elementwise values it writes anyway.

Autodiff recomputes cheap elementwise intermediates in the backward instead of saving them.
That is a loss when the forward writes the value regardless (an activation read by the
next matmul): the backward recomputed it in a pass of its own only to feed the weight
gradient's GEMM. Here such values are saved, as PyTorch does. "Written anyway": read by an
equation that runs as a plan step (fused readers do not count), or read on the way to a
fused reduction and elsewhere too: a kernel ends at its reduction, so the value leaves it
for its other readers (a scan's state ``x = a * x + b`` read by the step's ``sum(x * c)``
and by the next step). ``TRACEJIT_SAVE_WRITTEN=0``
restores plain recomputation. A static slice of a value saved anyway is not saved itself:
the backward slices again and reads it in place (slice_reads.py); nor is an expand that
only index steps read (a gather's ``idx[..., None].expand(...)``): both sides take the
view again (fusion.index_views).
"""
from __future__ import annotations

from .. import envflags

from ..jit.autodiff import _cheap
from ..jit.ir import Graph, Var
from .rowinline import inlined
from .fusion import FUSIBLE_REDUCTIONS, _elementwise_ok, index_views
from .slice_reads import static_slice

__all__ = ["recompute_unless_written"]


def recompute_unless_written(graph: Graph):
    """`split`'s ``cheap`` for `graph`: autodiff's rule, less the values the forward writes
    to memory anyway (see the module docstring)."""
    if envflags.is_off("TRACEJIT_SAVE_WRITTEN"):
        return _cheap
    written: set = set()
    views = index_views(graph)   # (an expanded index: a view, recomputed rather than saved)
    for e in graph.eqns:
        # (fusion's own rule)
        if not (_elementwise_ok(e) or e.prim in FUSIBLE_REDUCTIONS or inlined(e)):
            written.update(a for a in e.inputs if isinstance(a, Var) and a not in views)
    written |= _leaves_a_reduction(graph)
    made = {o: e for e in graph.eqns for o in e.outs}

    def cheap(e) -> bool:
        if static_slice(e):
            # a view of a value saved anyway: taken again by the backward
            src = made.get(e.inputs[0])
            return src is None or not cheap(src)
        return _cheap(e) and e.out not in written
    return cheap


def _leaves_a_reduction(graph: Graph) -> set:
    """Values read by two or more equations of which some lead to a fused reduction (through
    elementwise equations each read once) and the rest elsewhere, a different reduction or
    not: the reduction's kernel computes such a value and writes it for the others."""
    readers: dict = {}
    for e in graph.eqns:
        for a in dict.fromkeys(a for a in e.inputs if isinstance(a, Var)):
            readers.setdefault(a, []).append(e)

    def target(e, depth: int = 8):
        # the reduction `e` feeds, else None
        while depth:
            if e.prim in FUSIBLE_REDUCTIONS:
                return e
            if not _elementwise_ok(e) or len(readers.get(e.out, ())) != 1:
                return None
            e, depth = readers[e.out][0], depth - 1
        return None
    out = set()
    for v, rs in readers.items():
        if len(rs) > 1:
            ends = {id(target(r)) if target(r) is not None else None for r in rs}
            if len(ends) > 1 and ends != {None}:
                out.add(v)
    return out
