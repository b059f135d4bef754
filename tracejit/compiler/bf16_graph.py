"""bf16 in a compiled graph: each operation on bf16 values widened to float32 around it.

The same rule as eager bf16 (ops/bf16_eager.py), as a rewrite of the graph a plan
compiles: an equation that computes on bf16 operands gets ``cast -> float32`` on each of
them and a ``cast -> bf16`` on its result, so it computes in float32 and rounds once.
Data movement (views, shape ops), the casts themselves and products with a registered
bf16 implementation (compiler/cpu/gemm/bf16.py) keep the words. Fusion then merges the
casts into the kernels around them: a kernel loads bf16 words, computes in float32 and
stores bf16 words (compiler/bf16math.py), one lowering and no second path.
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..jit.ir import Eqn, Graph, Literal, Var
from ..ops.bf16_eager import words_prim
from ..ops.elementwise_logic import CAST
from ..ops.registry import Aval

__all__ = ["has_bf16", "widen"]

_BF16 = _dt.bfloat16
_F32 = _dt.float32


def has_bf16(graph: Graph) -> bool:
    """Whether some value of `graph` (its sub-graphs included) is bf16."""
    for v in graph.inputs:
        if v.aval.dtype is _BF16:
            return True
    for e in graph.eqns:
        if any(o.aval.dtype is _BF16 for o in e.outs):
            return True
        if any(isinstance(p, Graph) and has_bf16(p) for p in e.params.values()):
            return True
    return False


def _touches(e: Eqn) -> bool:
    return (any(isinstance(a, Var) and a.aval.dtype is _BF16 for a in e.inputs)
            or any(o.aval.dtype is _BF16 for o in e.outs)
            or any(v is _BF16 for v in e.params.values()))


def widen(graph: Graph) -> Graph:
    """`graph` with every computing equation on bf16 values run in float32 (see the top).

    A bf16 operand reached through views (a weight's transpose) is widened before the
    views, which are then taken of the float32 value: the widening fuses into the kernel
    that made the words (a transposed widening ran as a strided kernel of its own, 0.8 ms
    for a 1024x1024 weight). Each bf16 value is widened once, and what no equation
    reads any more is dropped."""
    eqns: list = []
    producer: dict = {}
    wide: dict = {}       # bf16 Var -> its float32 Var

    def f32_of(a, loc):
        w = wide.get(a)
        if w is not None:
            return w
        e = producer.get(a)
        if (e is not None and len(e.outs) == 1 and e.prim is not CAST
                and (e.prim.is_view or (e.prim.view_if is not None and e.prim.view_if(e.params)))
                and isinstance(e.inputs[0], Var) and e.inputs[0].aval.dtype is _BF16
                and all(not isinstance(x, Var) for x in e.inputs[1:])):
            w = Var(Aval(a.aval.shape, _F32, a.aval.device))
            eqns.append(Eqn(e.prim, (f32_of(e.inputs[0], e.loc),) + tuple(e.inputs[1:]), (w,), e.params, e.loc))
        else:
            w = Var(Aval(a.aval.shape, _F32, a.aval.device))
            eqns.append(Eqn(CAST, (a,), (w,), {"dtype": _F32}, loc))
        wide[a] = w
        return w

    for e in graph.eqns:
        if e.prim.kind == "control":
            params = {k: (widen(v) if isinstance(v, Graph) else v) for k, v in e.params.items()}
            eqns.append(Eqn(e.prim, e.inputs, e.outs, params, e.loc))
            continue
        if not _touches(e) or words_prim(e.prim, [a.aval for a in e.inputs if isinstance(a, Var)],
                                         e.params, [o.aval for o in e.outs]):
            eqns.append(e)
            for o in e.outs:
                producer[o] = e
            continue
        ins = []
        for a in e.inputs:
            if isinstance(a, Var) and a.aval.dtype is _BF16:
                a = f32_of(a, e.loc)
            elif isinstance(a, Literal) and a.aval.dtype is _BF16:
                a = Literal(a.value, Aval(a.aval.shape, _F32, a.aval.device, a.aval.weak))
            ins.append(a)
        outs, back = [], []
        for o in e.outs:
            if o.aval.dtype is _BF16:
                w = Var(Aval(o.aval.shape, _F32, o.aval.device))
                outs.append(w)
                back.append(Eqn(CAST, (w,), (o,), {"dtype": _BF16}, e.loc))
            else:
                outs.append(o)
        params = {k: (_F32 if v is _BF16 else v) for k, v in e.params.items()}
        eqns.append(Eqn(e.prim, tuple(ins), tuple(outs), params, e.loc))
        eqns += back
        for b in back:
            producer[b.out] = b
    return Graph(graph.inputs, tuple(_live(eqns, graph.outputs)), graph.outputs, graph.name)


def _live(eqns: list, outputs) -> list:
    """`eqns` without the casts and views whose values nothing reads (the bf16 forms the
    widening replaced)."""
    used = {a for a in outputs if isinstance(a, Var)}
    keep = []
    for e in reversed(eqns):
        pure = e.prim is CAST or e.prim.is_view or e.prim.kind == "shape"
        if pure and len(e.outs) == 1 and e.out not in used:
            continue
        keep.append(e)
        for a in e.inputs:
            if isinstance(a, Var):
                used.add(a)
    return keep[::-1]
