"""Self-attention's weights and context as one plan step: ``attention_weights`` and the
``attention_context`` that reads its weights run as one pass over the batch.

Why: the two primitives (ops/attention_prim.py) are each a launch over the cores, and the
context's ``w @ v`` then reads back from memory the 4 MB of weights the first one wrote
(the Transformer encoder benchmark's 16x4x128x128 float32). In one pass each batch
element's ``w @ v`` runs while its 256 KB of weights are in cache, in the same share of
the same launch. Measured (2 threads forced, right after a 2-thread GEMM, alternating,
load ~2): 2.49-2.67 -> 2.35-2.49 ms min for the pair.

The primitives stay two (each has its own VJP and eager path; `attention_context`'s
contract names the weights as an input); the pass only runs them together where a plan
computes both from one ``qkv``: `weights_and_context` returns exactly the two results
(the same per-element products and softmax rows). Like biasgemm.py's pass, it rewrites
the plan's items after fusion.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..jit.ir import Eqn, Var
from ..ops.attention_prim import weights_and_context
from .fusion import Group

__all__ = ["AttentionPair", "pair_attention", "ENABLED"]

# False: plans call the two primitives one after the other (A/B measurements, tests)
ENABLED = True


@dataclass(eq=False)
class AttentionPair:
    """``w = attention_weights(qkv, *mask)`` and ``ctx = attention_context(qkv, w)`` as one step."""
    weights: Eqn
    context: Eqn

    @property
    def inputs(self) -> list:
        return [a for a in self.weights.inputs if isinstance(a, Var)]

    @property
    def outs(self) -> list:
        return [self.weights.out, self.context.out]

    @property
    def defined(self) -> set:
        return set(self.outs)

    def describe(self) -> str:
        return "attention weights + context (one pass)"

    def emit(self, nm, consts: dict) -> list:
        consts["I_weights_and_context"] = weights_and_context
        ins = ", ".join(nm(a) for a in self.weights.inputs)
        kw = ", ".join(f"{k}={v!r}" for k, v in self.weights.params.items())
        return [f"    {nm(self.weights.out)}, {nm(self.context.out)} = I_weights_and_context(xp, {ins}, {kw})"]


def pair_attention(items: list, graph) -> list:
    """`items` with each `attention_weights` step whose weights an `attention_context` step
    of the same ``qkv`` and parameters reads replaced by an `AttentionPair` (at the weights'
    place; the context step is dropped)."""
    if not ENABLED:
        return items
    weights = {it.out: it for it in items if isinstance(it, Eqn) and it.prim.name == "attention_weights"
               and all(isinstance(a, Var) for a in it.inputs)}
    if not weights:
        return items
    replace: dict = {}
    drop: set = set()
    for it in items:
        if not (isinstance(it, Eqn) and it.prim.name == "attention_context"):
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
