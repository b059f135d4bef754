"""Split elementwise groups that read and write too many arrays into several kernels.

Where a backward recomputes a recurrent forward, greedy fusion makes one group of hundreds
of equations and operands: LLVM's vectorizer gives up on its overlap checks and the
prefetchers cannot follow its streams. Cut into parts of at most `MAX_OPERANDS` operands,
two LSTMCells over 100 steps went from 154 to 123 ms a step. Each part is a run of
consecutive equations, so parts read only earlier parts or the group's inputs and stand in
the group's place in order. Only plain elementwise groups are cut.
"""
from __future__ import annotations

from ..jit.ir import Graph, def_use
from .fusion import Group, external_inputs

__all__ = ["MAX_OPERANDS", "split_wide_groups"]

# Arrays (inputs and outputs) one part may take: a part of a long chain still fuses a few
# dozen equations. On that LSTMCell step 12, 24 and 48 ran alike; 96 as slowly as no cut.
MAX_OPERANDS = 24


def split_wide_groups(items: list, graph: Graph, max_operands: int | None = None) -> list:
    """`items` with each plain group of more than `max_operands` operands replaced by
    consecutive parts of at most that many (one equation with more stays a part alone)."""
    if max_operands is None:
        max_operands = MAX_OPERANDS
    wide = [it for it in items if isinstance(it, Group) and not it.rows and it.reduction is None
            and len(it.inputs) + len(it.outputs) > max_operands and len(it.eqns) > 1]
    if not wide:
        return items
    _, readers, results = def_use(graph)
    next_gid = 1 + max(it.gid for it in items if isinstance(it, Group))
    replace: dict = {}
    for g in wide:
        parts = []
        for eqns in _runs(g.eqns, readers, results, max_operands):
            ins, outs = _operands(eqns, readers, results)
            parts.append(Group(next_gid, g.shape, eqns=list(eqns), inputs=ins, outputs=outs))
            next_gid += 1
        replace[id(g)] = parts
    out = []
    for it in items:
        out.extend(replace.get(id(it), (it,)))
    return out


def _operands(eqns: list, readers: dict, results: set) -> tuple[list, list]:
    """(inputs, outputs) of a kernel computing `eqns`: the values it reads and does not
    compute, in first-use order, and the values it computes that anything else reads."""
    members = {id(e) for e in eqns}
    ins = external_inputs(eqns)
    outs = [e.out for e in eqns if e.out in results or any(id(r) not in members for r in readers.get(e.out, ()))]
    return ins, outs


def _runs(eqns: list, readers: dict, results: set, max_operands: int):
    """Consecutive runs of `eqns`, each as long as its operands stay within the bound."""
    start = 0
    while start < len(eqns):
        end = start + 1
        while end < len(eqns):
            ins, outs = _operands(eqns[start:end + 1], readers, results)
            if len(ins) + len(outs) > max_operands:
                break
            end += 1
        yield eqns[start:end]
        start = end

