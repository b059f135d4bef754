"""Self-attention's weights and context as one plan step: ``attention_weights`` and the
``attention_context`` that reads its weights run as one pass over the batch.

Why: as two launches the context's ``w @ v`` reads back the 4 MB of weights the first
wrote; in one pass each batch element's ``w @ v`` runs while its weights are in cache
(2.49-2.67 -> 2.35-2.49 ms min). The primitives stay two (own VJPs and eager paths); the
pass only runs them together where a plan computes both from one ``qkv``, with exactly the
same results. The backward's packed gradient and its sum over rows are one step too
(`AttentionBackwardSum`), the rows summed while in cache. Like gemm_steps.py's, it
rewrites the plan's items after fusion.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..jit.ir import Eqn, Var
from .cpu.kernels.attention_kernels import backward_and_column_sum, weights_and_context
from .gemm_steps import ColumnSum
from ..ops.attention_prim import ATTENTION_BACKWARD, ATTENTION_CONTEXT, ATTENTION_WEIGHTS
from ..ops.reductions import SUM
from .. import envflags

__all__ = ["AttentionPair", "AttentionBackwardSum", "pair_attention"]

# TRACEJIT_ATTENTION_PAIR=0 calls the two primitives apart; TRACEJIT_ATTENTION_BACKWARD_SUMS=0
# leaves the backward's bias gradient its own column sum (plan_patterns.py).


class _TwoEqnStep:
    """A step running two equations in one pass: its inputs are the first one's."""

    @property
    def inputs(self) -> list:
        return [a for a in self._pair()[0].inputs if isinstance(a, Var)]

    @property
    def outs(self) -> list:
        return [e.out for e in self._pair()]

    @property
    def defined(self) -> set:
        return set(self.outs)


@dataclass(eq=False)
class AttentionPair(_TwoEqnStep):
    """``w = attention_weights(qkv, *mask)`` and ``ctx = attention_context(qkv, w)`` as one step."""
    weights: Eqn
    context: Eqn

    def _pair(self) -> tuple:
        return self.weights, self.context

    def describe(self) -> str:
        return "attention weights + context (one pass)"

    def emit(self, nm, consts: dict) -> list:
        consts["I_weights_and_context"] = weights_and_context
        ins = ", ".join(nm(a) for a in self.weights.inputs)
        kw = ", ".join(f"{k}={v!r}" for k, v in self.weights.params.items())
        return [f"    {nm(self.weights.out)}, {nm(self.context.out)} = I_weights_and_context(xp, {ins}, {kw})"]


@dataclass(eq=False)
class AttentionBackwardSum(_TwoEqnStep):
    """``d = attention_backward(g, qkv, w)`` and ``s = sum(d)`` over every dim but the last as
    one step (`backward_and_column_sum`)."""
    backward: Eqn
    total: Eqn

    def _pair(self) -> tuple:
        return self.backward, self.total

    def describe(self) -> str:
        return "attention_backward + its sum over rows (one pass)"

    def emit(self, nm, consts: dict) -> list:
        consts["I_attention_backward_sum"] = backward_and_column_sum
        ins = ", ".join(nm(a) for a in self.backward.inputs)
        kw = ", ".join(f"{k}={v!r}" for k, v in self.backward.params.items())
        shape = tuple(int(d) for d in self.total.out.aval.shape)
        return [f"    {nm(self.backward.out)}, {nm(self.total.out)} = I_attention_backward_sum("
                f"xp, {ins}, shape={shape!r}, {kw})"]


def _row_sum(it):
    """The `sum` equation of a column sum step (an Eqn or gemm_steps' `ColumnSum`) over every
    dim of a rank-2 value but the last, else None."""
    e = it.eqn if isinstance(it, ColumnSum) else it
    if not (isinstance(e, Eqn) and e.prim is SUM and isinstance(e.inputs[0], Var)
            and len(e.inputs[0].aval.shape) == 2 and tuple(e.params["dims"]) == (0,)
            and all(isinstance(d, int) for d in e.out.aval.shape)):
        return None
    return e


def _pair_backward_sums(items: list) -> list:
    backward = {it.out: it for it in items if isinstance(it, Eqn) and it.prim is ATTENTION_BACKWARD
                and all(isinstance(a, Var) for a in it.inputs) and it.out.aval.device.type == "cpu"}
    replace: dict = {}
    drop: set = set()
    for it in items:
        e = _row_sum(it)
        be = backward.get(e.inputs[0]) if e is not None else None
        if be is None or id(be) in replace or e.out.aval.dtype != be.out.aval.dtype:
            continue
        replace[id(be)] = AttentionBackwardSum(be, e)
        drop.add(id(it))
    if not replace:
        return items
    return [replace.get(id(it), it) for it in items if id(it) not in drop]


def pair_attention(items: list, graph) -> list:
    """`items` with each `attention_weights` step whose weights a matching `attention_context`
    step reads replaced by an `AttentionPair` (the context step dropped), and each
    `attention_backward` whose output a column sum reads by an `AttentionBackwardSum`."""
    if envflags.enabled("TRACEJIT_ATTENTION_BACKWARD_SUMS"):
        items = _pair_backward_sums(items)
    weights = {it.out: it for it in items if isinstance(it, Eqn) and it.prim is ATTENTION_WEIGHTS
               and all(isinstance(a, Var) for a in it.inputs)}
    if not weights:
        return items
    replace: dict = {}
    drop: set = set()
    for it in items:
        if not (isinstance(it, Eqn) and it.prim is ATTENTION_CONTEXT):
            continue
        qkv, w = it.inputs
        we = weights.get(w)
        if we is None or id(we) in replace or we.inputs[0] is not qkv or we.params != it.params:
            continue
        replace[id(we)] = AttentionPair(we, it)
        drop.add(id(it))
    if not replace:
        return items
    return [replace.get(id(it), it) for it in items if id(it) not in drop]
