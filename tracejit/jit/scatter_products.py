"""An embedding's two gradients through the product after it, taken on the table's rows where
the table has fewer rows than the batch has tokens.

A layer reading an embedding ``X = E[idx]`` (V table rows, M = idx.size tokens) and multiplying
it by a weight has two gradients that run over the M rows of its output gradient G (M, K):

- the embedding's: ``index_add(zeros(V, O), views(G @ W), idx)``, the layer's input gradient
  added into the table rows: it equals ``index_add(zeros(V, K), views(G), idx) @ W``;
- the layer weight's: ``G^T @ views(E[idx])``: it equals ``index_add(zeros(V, K), views(G),
  idx)^T @ E``.

Both are the same sum S (V, K) of G's rows per table row, which `passes.cse` computes once,
and each product then has V rows instead of M. Where V is much less than M (a
character-level model's alphabet: the LSTM LM's 64 rows against 2048 tokens, each product
2048x1024x256 = 537M multiply-adds, ~3.5-4 ms on two threads) this leaves a pass adding M
rows of K and two V-row products (16.8M multiply-adds each). Applied where the new form
costs at most half the multiply-adds, on static 2-D products of floating values; the
views between the product and the index are reshapes and permutes that keep the last dim.
Results differ from the old order by float rounding (the sums are taken in another order).

`scattered_product` runs in `passes.simplify` (on an ``index_add``); `gathered_product` needs
the forward's ``getitem`` that the backward reads only as a saved value, so `autodiff.split`
applies it to the joint graph's backward half (`backward_rewrites`) before partitioning, and
`passes.simplify` also tries it on a ``matmul`` where both halves are one graph.
"""
from __future__ import annotations

from ..ops.registry import Aval
from ..ops.indexing import GETITEM, INDEX_ADD
from ..ops.linalg import MATMUL
from . import patterns as _patterns
from .ir import Eqn, Graph, Var
from ..ops.creation import FULL
from ..ops.shape import PERMUTE, RESHAPE

__all__ = ["scattered_product", "gathered_product", "backward_rewrites"]

_SPEC = (("t", 0),)


def _view_chain(a: Var, producer: dict, last: int, stop, uses: dict | None):
    """(views, eqn): the reshapes and permutes keeping the last dim `last` from the result of
    an equation of primitive `stop` to `a`, nearest `a` first; None where the path holds
    anything else (or, given `uses`, a value used elsewhere)."""
    views = []
    while True:
        p = producer.get(a)
        if p is None or not p.inputs or not isinstance(p.inputs[0], Var):
            return None
        if uses is not None and uses.get(a, 0) != 1:
            return None
        if p.prim is stop:
            return views, p
        src = p.inputs[0].aval.shape
        if p.prim is RESHAPE and len(src) and src[-1] == last and a.aval.shape[-1] == last:
            views.append(("reshape", tuple(a.aval.shape[:-1])))
        elif p.prim is PERMUTE and len(src) and p.params["dims"][-1] % len(src) == len(src) - 1:
            views.append(("permute", tuple(d % len(src) for d in p.params["dims"])))
        else:
            return None
        a = p.inputs[0]


def _apply_views(g: Var, steps: list, loc) -> tuple:
    """(eqns, value): `steps` ((kind, leading shape or dims), first applied first) applied to
    `g`, which keeps its own last dim. Consecutive reshapes are one (a reshape is of the
    values in row-major order whatever the layout), so the two gradients' views of G come
    out the same equations and `passes.cse` merges their sums."""
    merged = []
    for s in steps:
        if s[0] == "reshape" and merged and merged[-1][0] == "reshape":
            merged[-1] = s
        else:
            merged.append(s)
    eqns = []
    k = g.aval.shape[-1]
    for kind, arg in merged:
        if kind == "reshape":
            shape = arg + (k,)
            if shape == tuple(g.aval.shape):
                continue
            params = {"shape": shape}
        else:
            shape = tuple(g.aval.shape[d] for d in arg)
            params = {"dims": arg}
        out = Var(Aval(shape, g.aval.dtype, g.aval.device))
        eqns.append(Eqn({"reshape": RESHAPE, "permute": PERMUTE}[kind], (g,), (out,), params, loc))
        g = out
    return eqns, g


def _summed_rows(g: Var, steps: list, idx, V: int, loc) -> tuple:
    """(eqns, S): S = index_add(zeros(V, K), views(g), idx), the rows of g (M, K) summed per
    table row."""
    eqns, gv = _apply_views(g, steps, loc)
    dt, dev = g.aval.dtype, g.aval.device
    K = g.aval.shape[-1]
    zeros = Var(Aval((V, K), dt, dev))
    fill = {"shape": (V, K), "value": 0, "dtype": dt, "device": dev}
    eqns.append(Eqn(FULL, (), (zeros,), fill, loc))
    s = Var(Aval((V, K), dt, dev))
    eqns.append(Eqn(INDEX_ADD, (zeros, gv, idx), (s,), {"spec": _SPEC}, loc))
    return eqns, s


def _pays(V: int, M: int, K: int, O: int) -> bool:
    return 2 * (V * K * O + M * K) <= M * K * O


def _static_2d(*vs) -> bool:
    return all(isinstance(v, Var) and len(v.aval.shape) == 2 and all(isinstance(d, int) for d in v.aval.shape)
               and v.aval.dtype.is_floating_point for v in vs)


def scattered_product(e: Eqn, producer: dict, uses: dict):
    """``index_add(zeros(V, O), views(G @ W), idx)`` (the views and the product used only
    here) as ``index_add(zeros(V, K), views(G), idx) @ W``; None where it does not apply."""
    base, v = e.inputs[0], e.inputs[1]
    idx = e.inputs[2:]
    if tuple(e.params.get("spec", ())) != _SPEC or e.params.get("nonneg") or len(idx) != 1 or not isinstance(v, Var):
        return None
    fill = producer.get(base)
    if (fill is None or fill.prim is not FULL or fill.params.get("value") != 0
            or len(base.aval.shape) != 2):
        return None
    V, O = base.aval.shape
    if tuple(v.aval.shape) != tuple(idx[0].aval.shape) + (O,) or v.aval.dtype != base.aval.dtype:
        return None
    found = _view_chain(v, producer, O, MATMUL, uses)
    if found is None:
        return None
    views, m = found
    if len(m.inputs) != 2 or not _static_2d(*m.inputs):
        return None
    g, w = m.inputs
    M, K = g.aval.shape
    if w.aval.shape[1] != O or not isinstance(V, int) or not (g.aval.dtype == w.aval.dtype == v.aval.dtype):
        return None
    if not _pays(V, M, K, O):
        return None
    new, s = _summed_rows(g, list(reversed(views)), idx[0], V, e.loc)
    new.append(Eqn(m.prim, (s, w), e.outs, dict(m.params), m.loc))
    return new


def gathered_product(e: Eqn, producer: dict, uses=None):
    """``A @ views(E[idx])`` with A (K, M), the gathered rows' views ending (M, O), as
    ``index_add(zeros(V, K), views'(A^T), idx)^T @ E``; None where it does not apply.
    views' undoes the rows' views on A^T (M, K), so its rows line up with idx's entries."""
    if len(e.inputs) != 2 or not _static_2d(*e.inputs):
        return None
    a, b = e.inputs
    K, M = a.aval.shape
    O = b.aval.shape[1]
    found = _view_chain(b, producer, O, GETITEM, None)
    if found is None:
        return None
    views, q = found
    if tuple(q.params.get("spec", ())) != _SPEC or len(q.inputs) != 2 or not _static_2d(q.inputs[0]):
        return None
    table, idx = q.inputs
    V = table.aval.shape[0]
    if (table.aval.shape[1] != O or table.aval.dtype != a.aval.dtype or b.aval.dtype != a.aval.dtype
            or not isinstance(idx, Var) or not _pays(V, M, K, O)):
        return None
    new = []
    t = producer.get(a)
    if t is not None and t.prim is PERMUTE and tuple(t.params["dims"]) == (1, 0):
        g = t.inputs[0]
    else:
        g = Var(Aval((M, K), a.aval.dtype, a.aval.device))
        new.append(Eqn(PERMUTE, (a,), (g,), {"dims": (1, 0)}, e.loc))
    # undo the views, nearest b first: a reshape back to its input's leading shape, a
    # permute by the inverse permutation
    undo = []
    out = b
    for kind, arg in views:
        src = producer[out].inputs[0]
        if kind == "reshape":
            undo.append(("reshape", tuple(src.aval.shape[:-1])))
        else:
            inv = [0] * len(arg)
            for i, d in enumerate(arg):
                inv[d] = i
            undo.append(("permute", tuple(inv)))
        out = src
    eqns, s = _summed_rows(g, undo, idx, V, e.loc)
    new += eqns
    st = Var(Aval((K, V), a.aval.dtype, a.aval.device))
    new.append(Eqn(PERMUTE, (s,), (st,), {"dims": (1, 0)}, e.loc))
    new.append(Eqn(e.prim, (st, table), e.outs, dict(e.params), e.loc))
    return new


def backward_rewrites(j: Graph, n_fwd: int) -> Graph:
    """`j` (a joint graph: its first `n_fwd` equations the forward's) with the joint_backward
    stage's patterns (jit/patterns.py: `gathered_product`) applied to the backward's
    equations, the forward's equations unchanged."""
    producer = {o: e for e in j.eqns for o in e.outs}
    eqns = list(j.eqns[:n_fwd])
    changed = False
    for e in j.eqns[n_fwd:]:
        new = None
        for pattern in _patterns.equation_rewrites("joint_backward", e.prim):
            new = pattern.rewrite(e, producer) if pattern.applies() else None
            if new is not None:
                break
        if new is None:
            eqns.append(e)
            continue
        changed = True
        for q in new:
            eqns.append(q)
            for o in q.outs:
                producer[o] = q
    return Graph(j.inputs, tuple(eqns), j.outputs, j.name) if changed else j


# The patterns (jit/patterns.py); TRACEJIT_SCATTER_PRODUCTS=0 keeps both gradients over the
# tokens' rows (A/B measurements)
_patterns.register(_patterns.Pattern("scattered_product", scattered_product, ("simplify",), (INDEX_ADD,),
                                     switch="TRACEJIT_SCATTER_PRODUCTS"))
_patterns.register(_patterns.Pattern("gathered_product", gathered_product, ("simplify", "joint_backward"),
                                     (MATMUL,), switch="TRACEJIT_SCATTER_PRODUCTS"))
