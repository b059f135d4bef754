"""Gradients of a value split into slices, as one concatenation.

A value cut into blocks along one axis (``chunk``/``split``/``unbind``: an LSTM's four
gate blocks, attention's q, k, v) gets one ``getitem`` per block. Each getitem's own VJP
writes its block's gradient into a full-size zero tensor (``index_add``), and the
engine sums them: per LSTM step four full-size zero fills, four copies with an add and
a sum kernel, where one ``concat`` of the blocks' gradients is the whole answer.

`SliceGrads` collects, during reverse-mode differentiation (`autodiff._backward_eqns`),
the cotangents of such getitems per sliced value; when the value's own equation is
reached (all its uses have been seen) it emits one ``concat`` of the blocks along the
axis, zeros filling the gaps; blocks that overlap (``x[..., :-1]`` and ``x[..., 1:]``), one
concat per run of blocks that tile, summed. Blocks cut along different axes take the
getitems' own VJPs. A lone block is a concat with zero gaps as well.
"""
from __future__ import annotations

from .ir import Eqn, Var
from ..ops.indexing import GETITEM

__all__ = ["SliceGrads"]


def _block(e: Eqn):
    """(axis, lo, hi, is_int) if getitem `e` takes one block along one axis of its operand
    (every other index a full slice; static sizes), else None."""
    a = e.inputs[0]
    if len(e.inputs) != 1 or not isinstance(a, Var):
        return None
    shape = a.aval.shape
    spec = e.params["spec"]
    if len(spec) > len(shape):
        return None
    cut = None
    for axis, x in enumerate(spec):
        if x == ("s", None, None, None):
            continue
        if cut is not None or x[0] not in ("s", "i"):
            return None
        d = shape[axis]
        if not isinstance(d, int):
            return None
        if x[0] == "i":
            if not isinstance(x[1], int) or not -d <= x[1] < d:
                return None
            k = x[1] % d
            cut = (axis, k, k + 1, True)
            continue
        start, stop, step = x[1:]
        if step not in (None, 1) or not all(v is None or type(v) is int for v in (start, stop)):
            return None
        lo, hi, _ = slice(start, stop, 1).indices(d)
        if hi <= lo:
            return None
        cut = (axis, lo, hi, False)
    return cut


class SliceGrads:
    """Getitem cotangents held back until their operand's gradient is assembled."""

    def __init__(self):
        self.pending: dict = {}     # operand Var -> [(axis, lo, hi, is_int, eqn)]
        # Values cut the same way whose blocks get the same gradients (an LSTM step's
        # input projection and hidden projection, added block by block) share one concat:
        # later passes then see one value (a scan stacks it once, not twice).
        self._made: dict = {}

    def take(self, e: Eqn, act: set, ct: dict) -> bool:
        """Hold back getitem `e`'s gradient if it is a block of its operand; -> taken?"""
        if e.prim is not GETITEM or ct.get(e.out) is None:
            return False
        a = e.inputs[0]
        if not (isinstance(a, Var) and a in act):
            return False
        blk = _block(e)
        if blk is None:
            return False
        self.pending.setdefault(a, []).append(blk + (e,))
        return True

    def flush(self, a, ctx, ct: dict, vjp_one) -> None:
        """Add the held-back blocks' gradient to ``ct[a]`` (one concat per run of blocks
        that tile along one axis; each getitem's own VJP via `vjp_one` where they cut
        along different axes)."""
        blocks = self.pending.pop(a, None)
        if not blocks:
            return
        blocks.sort(key=lambda b: b[1])
        axis = blocks[0][0]
        # A single block takes the concat path too (an LSTM's states of which only h has a
        # gradient): one concat with a zero gap writes the value once, where the getitem
        # VJP fills a full-size zero tensor and then index_adds the block into it.
        if any(b[0] != axis for b in blocks):
            for b in blocks:
                vjp_one(b[4])
            return
        # Overlapping blocks (``x[..., :-1]`` and ``x[..., 1:]``, a B-spline recursion's
        # neighbours) split into runs that tile, one concat each, summed.
        runs: list = []
        for b in blocks:
            run = next((r for r in runs if r[-1][2] <= b[1]), None)
            runs.append([b]) if run is None else run.append(b)
        for run in runs:
            self._concat(a, ctx, ct, axis, run)

    def _concat(self, a, ctx, ct: dict, axis: int, blocks: list) -> None:
        from .. import ops
        from ..autograd.engine import _fit
        shape = tuple(a.aval.shape)
        dtype = a.aval.dtype
        prev_loc = ctx.loc_override
        ctx.loc_override = blocks[0][4].loc
        key = (axis, shape, dtype, tuple((lo, hi, is_int, id(ct[e.out])) for _, lo, hi, is_int, e in blocks))
        try:
            with ctx:
                gr = self._made.get(key, (None,))[0]
                if gr is None:
                    def gap(n):
                        return ops.zeros(shape[:axis] + (n,) + shape[axis + 1:], dtype=dtype)
                    parts, at = [], 0
                    for _, lo, hi, is_int, e in blocks:
                        if lo > at:
                            parts.append(gap(lo - at))
                        parts.append(ops.unsqueeze(ct[e.out], axis) if is_int else ct[e.out])
                        at = hi
                    if at < shape[axis]:
                        parts.append(gap(shape[axis] - at))
                    gr = _fit(ops.cat(parts, axis), (shape, dtype))
                    self._made[key] = (gr, [ct[b[4].out] for b in blocks])   # keeps the ids valid
                prev = ct.get(a)
                ct[a] = gr if prev is None else prev + gr
        finally:
            ctx.loc_override = prev_loc
