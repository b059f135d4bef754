"""Two independent matrix products of a plan as one step: ``c1, c2 = MATMUL2(a1, b1, a2, b2)``,
run at once on the two cores where the runtime can (router.matmul_pair, compiler/cpu/gemm/halves.py's
`pair`), one after the other otherwise.

Why: a layer's backward makes two products of one output gradient, the input gradient
``g @ W`` and the weight gradient ``g.T @ a``, which read nothing of each other's. Each ran
on OpenBLAS's two threads, which meet at every panel of a product; two one-thread products,
one per core, meet once. This
pass makes it a plan step, like biasgemm.py's and attnpair.py's, run after them on the
items. In the MLP step (SCHED_FIFO, policy off): the pair 3.82-3.91 ms against
3.98-4.07 one after the other, the step's GEMM time -0.2 ms (router.PAIR_MNK's comment).
The bench's other models pair products too (the CNN's fully connected layer, the LSTM
model's and the Transformer's projections): in-process A/B, CNN -0.09 ms (6 of 8 rounds
lower), Transformer -0.16 / +0.15, LSTM -0.06 / +0.14 (two runs each): no loss.

Which: a ``matmul`` step of two 2-D operands and static shapes, both products of at least
router.PAIR_MNK multiply-adds, followed (with at most `WINDOW` transposes or reshapes of
other values in between) by another such product that reads neither its result nor a view
of it. The views in between that read neither move before the pair, the others after it;
nothing else moves. The results are each product's own (one BLAS call each: on one thread
instead of two where the pair runs, which may round differently in the last bits, as
BLAS's thread counts do).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..jit.ir import Eqn, Var
from ..ops.shape import PERMUTE, RESHAPE
from ..shapes import Sym
from ..ops.linalg import MATMUL

__all__ = ["GemmPair", "pair_gemms", "WINDOW"]

# A plan pattern (compiler/plan_patterns.py): TRACEJIT_GEMM_PAIRS=0 calls the two products
# one after the other (A/B measurements, tests).
# Steps at most between the two products (the MLP's backward has one: ``g.T``)
WINDOW = 4
_VIEWS = (PERMUTE, RESHAPE)


@dataclass(eq=False)
class GemmPair:
    """``c1 = a1 @ b1`` and ``c2 = a2 @ b2`` (two ``matmul`` steps) as one step."""
    first: Eqn
    second: Eqn

    @property
    def inputs(self) -> list:
        return [a for e in (self.first, self.second) for a in e.inputs if isinstance(a, Var)]

    @property
    def outs(self) -> list:
        return [self.first.out, self.second.out]

    @property
    def defined(self) -> set:
        return set(self.outs)

    def describe(self) -> str:
        return "two matmuls at once"

    def emit(self, nm, consts: dict) -> list:
        from .cpu.gemm.router import matmul_pair
        consts["MATMUL2"] = matmul_pair
        a1, b1 = (nm(a) for a in self.first.inputs)
        a2, b2 = (nm(a) for a in self.second.inputs)
        return [f"    {nm(self.first.out)}, {nm(self.second.out)} = MATMUL2({a1}, {b1}, {a2}, {b2})"]


def _product(it) -> bool:
    """Whether `it` is a ``matmul`` step a pair may take (module docstring)."""
    if not (isinstance(it, Eqn) and it.prim is MATMUL and len(it.inputs) == 2):
        return False
    a, b = it.inputs
    if not (isinstance(a, Var) and isinstance(b, Var)):
        return False
    sa, sb = tuple(a.aval.shape), tuple(b.aval.shape)
    if len(sa) != 2 or len(sb) != 2 or any(isinstance(d, Sym) for d in sa + sb):
        return False
    from .cpu.gemm.router import PAIR_MNK
    return a.aval.dtype.name in ("float32", "float64") and sa[0] * sa[1] * sb[1] >= PAIR_MNK


def _view(it) -> bool:
    return isinstance(it, Eqn) and it.prim in _VIEWS


def pair_gemms(items: list, graph) -> list:
    """`items` with each pair of independent products (module docstring) made one
    `GemmPair` step, at the first product's place."""
    out, i = [], 0
    while i < len(items):
        it = items[i]
        if not _product(it):
            out.append(it)
            i += 1
            continue
        reads = set(it.outs)       # its result and the views of it
        before, after = [], []
        j = i + 1
        while j < len(items) and j - i <= WINDOW and _view(items[j]):
            v = items[j]
            if any(x in reads for x in v.inputs):
                after.append(v)
                reads.update(v.outs)
            else:
                before.append(v)
            j += 1
        nxt = items[j] if j < len(items) else None
        if nxt is None or not _product(nxt) or any(x in reads for x in nxt.inputs):
            out.append(it)
            i += 1
            continue
        out += before
        out.append(GemmPair(it, nxt))
        out += after
        i = j + 1
    return out
