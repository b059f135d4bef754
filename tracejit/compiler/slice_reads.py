"""Slice reads: a kernel reads a static slice of an array in place, at an offset.

A group that reads ``y = x[:, 51:102]`` (a column slice: an LSTM cell's gate of the
product that computes all four, one head of a projection) would otherwise get the view
``y``, whose rows are strided. A strided operand either takes the "nd" variant, whose
general strides keep LLVM from vectorizing, or a copy to C order before the call (plan.py).
Here the group reads ``x`` itself instead, C-contiguous as it was made, at
``x[i0 + 0, i1 + 51]``: the inner loop stays unit-stride and nothing is copied, and where
nothing else reads the view its ``getitem`` step is dropped from the plan.

`fold_slice_reads` decides it once per plan: for each elementwise map (no rows, window or
reduction: those loop forms index their operands themselves), each input made by a ``getitem`` of
unit-step slices with static bounds whose result has the group's iteration shape is
recorded in ``Group.reads`` as (the sliced array, the offset of each dim). The lowering
(loopnest.py) gives that operand the offsets; every renderer adds them to its index.
"""
from __future__ import annotations

from ..jit.ir import Eqn, Graph, Var
from ..ops.indexing import GETITEM
from .fusion import Group

__all__ = ["fold_slice_reads", "operand_var", "static_slice"]


def _offsets(e: Eqn) -> tuple | None:
    """The start of each dim of getitem `e`'s result in its operand, or None where `e`
    is not a slice of unit steps and static bounds that keeps the operand's rank."""
    if e.prim is not GETITEM or len(e.inputs) != 1 or not isinstance(e.inputs[0], Var):
        return None
    src = tuple(e.inputs[0].aval.shape)
    spec = e.params["spec"]
    if len(spec) > len(src) or not all(isinstance(d, int) for d in src):
        return None
    out = []
    for j, d in enumerate(src):
        if j >= len(spec):
            out.append(0)
            continue
        x = spec[j]
        if x[0] != "s" or x[3] not in (None, 1) or not all(b is None or type(b) is int for b in x[1:3]):
            return None
        out.append(slice(x[1], x[2], 1).indices(d)[0])
    return tuple(out)


def static_slice(e: Eqn) -> bool:
    """Whether `e` is a getitem of unit-step slices with static bounds keeping the rank."""
    return _offsets(e) is not None


def fold_slice_reads(items: list, graph: Graph) -> list:
    """`items` with each plain group's static-slice inputs read in place (``Group.reads``)
    and the getitem steps that nothing else reads removed."""
    made = {e.out: e for e in items if isinstance(e, Eqn) and len(e.outs) == 1}
    folded: dict = {}     # the slice Var -> groups reading it in place
    for g in items:
        if not isinstance(g, Group) or g.rows or g.window is not None or g.reduction is not None:
            continue
        shape = tuple(g.shape)
        for v in g.inputs:
            e = made.get(v)
            if e is None or tuple(v.aval.shape) != shape or v in g.reads:
                continue
            offsets = _offsets(e)
            if offsets is None or len(offsets) != len(shape):
                continue
            g.reads[v] = (e.inputs[0], offsets)
            folded.setdefault(v, []).append(g)
    if not folded:
        return items
    needed = {x for it in items if not (isinstance(it, Group) and it.reads)
              for x in (it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)])}
    needed |= {x for it in items if isinstance(it, Group) for x in it.inputs if x not in it.reads}
    needed |= {a for a in graph.outputs if isinstance(a, Var)}
    return [it for it in items if not (isinstance(it, Eqn) and it.out in folded and it.out not in needed)]


def operand_var(group: Group, v: Var) -> Var:
    """The array the plan passes for group input `v`: the sliced array where the group
    reads `v` in place, else `v`."""
    read = group.reads.get(v) if group.reads else None
    return v if read is None else read[0]
