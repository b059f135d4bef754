"""Slice reads: a kernel reads a static slice of an array in place, at an offset.

A group reading ``y = x[:, 51:102]`` (an LSTM cell's gate, a projection's head) would get
strided rows, and so either the unvectorized "nd" variant or a copy. Here it reads ``x``
itself at ``x[i0 + 0, i1 + 51]``: unit stride, no copy, and the ``getitem`` step goes where
nothing else reads the view. `fold_slice_reads` records, per elementwise map, each input
made by a static unit-step slice of the group's shape in ``Group.reads`` (array, offsets);
the lowering gives the operand the offsets and every renderer adds them. Rows groups
read in place too, and so does an input broadcast against the group (a knot vector's
slice read by every batch row): a small strided operand keeps the whole loop on the
"nd" variant, whose per-row stride checks cost more than the row (256x128 rows of 13:
0.33 ms read in place, 0.84 on "nd").
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
    if not all(x[0] == "s" and x[3] in (None, 1)
               and all(b is None or type(b) is int for b in x[1:3]) for x in spec):
        return None
    starts = tuple(slice(x[1], x[2], 1).indices(d)[0] for x, d in zip(spec, src))
    return starts + (0,) * (len(src) - len(spec))


def static_slice(e: Eqn) -> bool:
    """Whether `e` is a getitem of unit-step slices with static bounds keeping the rank."""
    return _offsets(e) is not None


def fold_slice_reads(items: list, graph: Graph) -> list:
    """`items` with each plain group's static-slice inputs read in place (``Group.reads``)
    and the getitem steps that nothing else reads removed."""
    made = {e.out: e for e in items if isinstance(e, Eqn) and len(e.outs) == 1}
    folded: dict = {}     # the slice Var -> groups reading it in place
    for g in items:
        if not isinstance(g, Group) or g.window is not None or g.reduction is not None or g.scatter is not None:
            continue
        shape = tuple(g.shape)
        for v in g.inputs:
            e = made.get(v)
            fits = e is not None and _fits(tuple(v.aval.shape), shape) and v not in g.reads
            offsets = _offsets(e) if fits else None
            if offsets is not None:
                g.reads[v] = (e.inputs[0], offsets)
                folded.setdefault(v, []).append(g)
    if not folded:
        return items
    needed = {x for it in items if not (isinstance(it, Group) and it.reads)
              for x in (it.inputs if isinstance(it, Group) else [a for a in it.inputs if isinstance(a, Var)])}
    needed |= {x for it in items if isinstance(it, Group) for x in it.inputs if x not in it.reads}
    needed |= {a for a in graph.outputs if isinstance(a, Var)}
    return [it for it in items if not (isinstance(it, Eqn) and it.out in folded and it.out not in needed)]


def _fits(vs: tuple, shape: tuple) -> bool:
    """Whether a slice of shape `vs` is read per element of a group of `shape`: the group's
    trailing dims, each equal or 1 (broadcast: a row of knots read by every batch row)."""
    return (0 < len(vs) <= len(shape) and all(isinstance(d, int) for d in vs)
            and all(d == 1 or d == s for d, s in zip(vs, shape[len(shape) - len(vs):])))


def operand_var(group: Group, v: Var) -> Var:
    """The array the plan passes for group input `v`: the sliced array where the group
    reads `v` in place, else `v`."""
    read = group.reads.get(v) if group.reads else None
    return v if read is None else read[0]
