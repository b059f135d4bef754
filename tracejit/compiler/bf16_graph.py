"""bf16 in a compiled graph: each operation on bf16 values widened to float32 around it.

The rule of eager bf16 (ops/bf16_eager.py) as a graph rewrite: an equation computing on
bf16 operands gets ``cast -> float32`` on each and ``cast -> bf16`` on its result. Data
movement, the casts and products with a bf16 implementation keep the words; fusion then
merges the casts into the kernels around them (bf16math.py): one lowering, no second path.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..bf16 import to_bfloat16, to_float32
from ..jit.ir import Eqn, Graph, Literal, Var
from ..ops.bf16_eager import words_prim
from ..ops.elementwise_logic import CAST
from ..ops.registry import Aval

__all__ = ["has_bf16", "widen", "save_wide"]

_BF16 = _dt.bfloat16
_F32 = _dt.float32


def has_bf16(graph: Graph) -> bool:
    """Whether some value of `graph` (its sub-graphs included) is bf16."""
    return (any(v.aval.dtype is _BF16 for v in graph.inputs)
            or any(o.aval.dtype is _BF16 for e in graph.eqns for o in e.outs)
            or any(isinstance(p, Graph) and has_bf16(p)
                   for e in graph.eqns for p in e.params.values()))


def _touches(e: Eqn) -> bool:
    return (any(isinstance(a, Var) and a.aval.dtype is _BF16 for a in e.inputs)
            or any(o.aval.dtype is _BF16 for o in e.outs)
            or any(v is _BF16 for v in e.params.values()))


def widen(graph: Graph, wide: dict | None = None) -> Graph:
    """`graph` with every computing equation on bf16 values run in float32. A bf16 operand
    reached through views is widened before them, so the widening fuses into the kernel
    that made the words; each value is widened once. A result that only selects among bf16
    values (relu, max pooling, im2col: `_selects`) is bf16 already, so it is read
    unrounded. `wide`, when given, receives each widened Var's float32 Var."""
    eqns: list = []
    producer: dict = {}
    wide = {} if wide is None else wide       # bf16 Var -> its float32 Var
    exact: set = set()    # float32 Vars whose values are bf16 values

    def f32_of(a, loc):
        w = wide.get(a)
        if w is not None:
            return w
        e = producer.get(a)
        w = Var(Aval(a.aval.shape, _F32, a.aval.device))
        if (e is not None and len(e.outs) == 1 and e.prim is not CAST and _is_view(e)
                and isinstance(e.inputs[0], Var) and e.inputs[0].aval.dtype is _BF16
                and all(not isinstance(x, Var) for x in e.inputs[1:])):
            eqns.append(Eqn(e.prim, (f32_of(e.inputs[0], e.loc),) + tuple(e.inputs[1:]), (w,), e.params, e.loc))
        else:
            eqns.append(Eqn(CAST, (a,), (w,), {"dtype": _F32}, loc))
        wide[a] = w
        exact.add(w)
        return w

    same: dict = {}       # Var -> the Var of the same values it reads as (`_track_exact`)
    for e in graph.eqns:
        if same:
            e = _sub(e, same)
        if e.prim.kind == "control":
            params = {k: (widen(v) if isinstance(v, Graph) else v) for k, v in e.params.items()}
            eqns.append(Eqn(e.prim, e.inputs, e.outs, params, e.loc))
            continue
        if not _touches(e) or words_prim(e.prim, [a.aval for a in e.inputs if isinstance(a, Var)],
                                         e.params, [o.aval for o in e.outs]):
            eqns.append(e)
            for o in e.outs:
                producer[o] = e
            _track_exact(e, wide, exact, same)
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
        keeps = _selects(e.prim, ins, params, exact)
        for b in back:
            producer[b.out] = b
            if keeps:
                exact.add(b.inputs[0])
                wide[b.out] = b.inputs[0]
    outs = tuple(same.get(a, a) if isinstance(a, Var) else a for a in graph.outputs)
    return Graph(graph.inputs, tuple(_live(eqns, outs)), outs, graph.name)


def _track_exact(e: Eqn, wide: dict, exact: set, same: dict) -> None:
    """Note what an equation kept as it is says of bf16 values: a widening cast's result is
    exact, so is a selection or view of exact float32 values, and a rounding of an exact
    value is read back as that value (a gradient rounded where it was computed, then
    rounded again to a bf16 operand's dtype: one rounding, no pass; `same` maps the
    widening of such a rounding to the value itself)."""
    if e.prim is CAST and len(e.outs) == 1 and isinstance(e.inputs[0], Var):
        a, o = e.inputs[0], e.out
        if a.aval.dtype is _BF16 and o.aval.dtype is _F32:
            w = wide.get(a)
            if w is not None and w in exact:
                same[o] = w
            else:
                exact.add(o)
                wide.setdefault(a, o)
        elif a.aval.dtype is _F32 and o.aval.dtype is _BF16 and a in exact:
            wide[o] = a
    elif (len(e.outs) == 1 and e.out.aval.dtype is _F32 and any(isinstance(a, Var) for a in e.inputs)
          and _selects(e.prim, e.inputs, e.params, exact)):
        exact.add(e.out)


def _selects(prim, ins, params, exact: set) -> bool:
    """Whether `prim`'s floating results are bf16 values: it only selects among its
    operands and parameters (``extra["selects"]``, or moves them), and they are bf16 values."""
    sel = prim.extra.get("selects")
    if callable(sel):
        sel = sel(params)
    if not (sel or prim.is_view or prim.kind == "shape"):
        return False
    shape_only = prim.extra.get("shape_only", ())
    for i, a in enumerate(ins):
        if i in shape_only:
            continue
        if isinstance(a, Var):
            d = a.aval.dtype
            if (a not in exact if d.is_floating_point
                    else not d.is_bool and prim.kind != "index"):   # (an integer may round)
                return False
        elif isinstance(a, Literal) and not _is_bf16_value(a.value):
            return False
    return all(_is_bf16_value(v) for v in params.values() if isinstance(v, float))


def _is_bf16_value(v) -> bool:
    if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
        return isinstance(v, bool)
    f = np.float32(v)
    return bool(to_float32(to_bfloat16(np.array([f])))[0] == f or f != f) and float(f) == float(v)


def save_wide(fwd: Graph, bwd: Graph, n_in: int, n_out: int, n_saved: int) -> tuple:
    """A training pair widened, where a saved bf16 value whose float32 form the forward
    has in memory anyway (widened for a product, or a pooling's result) goes to the
    backward in that form (the backward's widening was a pass of its own). Same values:
    widening bf16 is exact."""
    wide: dict = {}
    fwd, bwd = widen(fwd, wide), widen(bwd)
    reads = _readers(fwd)
    made = {o: e for e in fwd.eqns for o in e.outs}
    outs, ins = list(fwd.outputs), list(bwd.inputs)
    subst: dict = {}
    swapped = False
    for i in range(n_saved):
        s, b = outs[n_out + i], ins[n_in + i]
        w = wide.get(s)
        if w is None or not (_feeds_product(w, reads) or _written(w, made)):
            continue
        uses = _readers(bwd).get(b, [])
        if b in bwd.outputs or any(e.prim is not CAST or e.params.get("dtype") is not _F32
                                               for e in uses):
            continue
        outs[n_out + i] = w
        ins[n_in + i] = nb = Var(w.aval)
        swapped = True
        for e in uses:
            subst[e.out] = nb
    if not swapped:
        return fwd, bwd
    fwd = Graph(fwd.inputs, tuple(_live(list(fwd.eqns), outs)), tuple(outs), fwd.name)
    eqns = [_sub(e, subst) for e in bwd.eqns if not (e.prim is CAST and e.out in subst)]
    return fwd, Graph(tuple(ins), tuple(eqns), tuple(subst.get(a, a) for a in bwd.outputs), bwd.name)


def _readers(g: Graph) -> dict:
    """Var -> the equations of `g` that read it."""
    r: dict = {}
    for e in g.eqns:
        for a in e.inputs:
            if isinstance(a, Var):
                r.setdefault(a, []).append(e)
    return r


def _written(w: Var, made: dict) -> bool:
    """Whether float32 `w` is the result of an equation no elementwise kernel computes (a
    pooling's record, a selection from it), so it is in memory: saved in its float32 form,
    the backward reads it with no widening pass and the forward writes no bf16 copy."""
    e = made.get(w)
    return e is not None and e.prim.kind not in ("elementwise", "shape") and not _is_view(e)


def _feeds_product(w: Var, reads: dict) -> bool:
    """Whether float32 `w` (or a view of it) is a product's operand, so it is in memory."""
    for e in reads.get(w, ()):
        if e.prim.kind == "matmul":
            return True
        if _is_view(e) and len(e.outs) == 1 and _feeds_product(e.out, reads):
            return True
    return False


def _is_view(e: Eqn) -> bool:
    return e.prim.is_view or (e.prim.view_if is not None and e.prim.view_if(e.params))


def _sub(e: Eqn, subst: dict) -> Eqn:
    if not any(isinstance(a, Var) and a in subst for a in e.inputs):
        return e
    return Eqn(e.prim, tuple(subst.get(a, a) if isinstance(a, Var) else a for a in e.inputs), e.outs,
               e.params, e.loc)


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
