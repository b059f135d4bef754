"""Tier 0: a captured graph run through the eager ops, as the eager code it stands for.

The IR interpreter is the reference semantics; `Tier0` runs it as one generated function per
graph (`jit.interpreter.straight_line`), dropping each value after its last use, so an
entry's first calls cost what eager costs (compiler/tiers.py switches to compiled kernels
when they are in).
"""
from __future__ import annotations

from typing import Optional

from ..jit.backend import Interpreted
from ..jit.interpreter import last_uses, straight_line
from ..ops.indexing import GETITEM

__all__ = ["Tier0"]


class Tier0(Interpreted):
    """The IR interpreter, run as the eager code it stands for would run: each value goes
    after its last use (holding them faulted in 12 MB more per Transformer call), and a
    value cut into all its slices by int selects is cut by one `unbind_steps` node, as
    eager attention does (its backward one ``stack``, not three zero tensors). Same values
    either way."""

    def __init__(self, graph):
        super().__init__(graph)
        self._drops = None
        self._steps = None
        self._run = None

    def __call__(self, ins: list) -> list:
        run = self._run
        if run is None:
            # The graph as one generated function (`straight_line`: `interpret` unrolled):
            # 0.1-2 ms once, against 3-4 us per equation and call saved.
            self._drops, self._steps = last_uses(self.graph), _unbind_steps(self.graph)
            run = self._run = straight_line(self.graph, self._drops, self._steps)
        from .cpu.kernels.vectorized import serving_tier0   # (an op's module: imported by now)
        with serving_tier0():
            return run(ins)


def _unbind_steps(graph) -> Optional[dict]:
    """`interpret`'s ``steps`` for the getitems that select every index of one axis of a
    value once (jit/slice_grads.py's blocks), or None when there are none."""
    from ..jit.ir import Var
    from ..jit.slice_grads import _block   # (the one definition of "a block of a value")
    cuts: dict = {}
    for i, e in enumerate(graph.eqns):
        if e.prim is GETITEM:
            blk = _block(e)
            if blk is not None and blk[3]:
                cuts.setdefault(e.inputs[0], []).append((blk[0], blk[1], i))
    steps = {}
    for v, sel in cuts.items():
        axis = sel[0][0]
        d = v.aval.shape[axis] if isinstance(v, Var) else None
        if all(a == axis for a, _, _ in sel) and sorted(k for _, k, _ in sel) == list(range(d or 0)) \
                and d:
            for _, k, i in sel:
                steps[i] = _unbound(v, axis, k)
    return steps or None


def _unbound(v, axis: int, k: int):
    from ..jit.loops import unbind_steps

    def step(vals, state):
        parts = state.get(v)
        if parts is None:
            parts = state[v] = unbind_steps(vals[0], axis)
        return [parts[k]]
    return step
