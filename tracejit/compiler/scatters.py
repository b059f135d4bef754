"""Scatter groups: an add of rows by index (``out[idx[i], ...] += src[i, ...]``) as a loop form.

An ``index_add`` of whole rows by one integer index array on the first dim (an embedding's
backward, ``index_add_`` along dim 0, ``index_put_(accumulate=True)``, a ``scatter_add``
by one row vector expanded along the other dims, rewritten into one by the simplify-stage
pattern `rows_scatter_add`) walks its updates,
the iteration space of `src`'s shape, and adds each into the row its index names
(loopnest.Scatter, codegen_cpu_loops.py). Where an elementwise group computes `src` and
nothing else reads it, the add joins that group as its *scatter*, so `src` is never
written. The updates are added in their order, as np.add.at does, so the result is bitwise
the numpy form's whatever the thread count: the parallel variant splits the non-indexed
axis. CPU only (the CUDA backend runs the step).
"""
from __future__ import annotations

import math

from ..jit.ir import Eqn, Var
from ..jit.patterns import Pattern, register
from ..ops.gather_prim import SCATTER_ADD
from ..ops.shape_params import WHOLE_DIM

__all__ = ["attach_scatters", "rows_scatter_add", "scatter_ok", "whole_rows", "INDEX_DTYPES"]

_FLOATS = ("float32", "float64")
INDEX_DTYPES = ("int32", "int64")


def whole_rows(spec) -> bool:
    """Whether an ``index_add``'s index `spec` adds whole rows by one index array on the first dim."""
    return spec[0] == ("t", 0) and all(x == WHOLE_DIM[0] for x in spec[1:])


def scatter_ok(e) -> bool:
    """Whether equation `e` is an add of whole rows a scatter group takes: ``index_add`` of
    float32/float64 rows by one integer index array on the first dim (other dims whole),
    its update of exactly the index's shape followed by a row's, on the CPU."""
    from ..ops.indexing import INDEX_ADD
    if not isinstance(e, Eqn) or e.prim is not INDEX_ADD or len(e.inputs) != 3 or len(e.outs) != 1:
        return False
    a, v, idx = e.inputs
    spec = e.params["spec"]
    if not all(isinstance(x, Var) for x in e.inputs) or not whole_rows(spec) or e.out.aval.device.type != "cpu":
        return False
    ash = tuple(a.aval.shape)
    return (bool(ash) and bool(idx.aval.shape) and idx.aval.dtype.name in INDEX_DTYPES
            and a.aval.dtype is v.aval.dtype and a.aval.dtype.name in _FLOATS
            and tuple(v.aval.shape) == tuple(idx.aval.shape) + ash[1:])


def rows_scatter_add(e: Eqn, producer: dict, uses: dict):
    """``scatter_add`` along dim 0 by one vector of rows expanded along the other dims (a
    graph network's ``index.view(-1, 1).expand_as(src)``) as the ``index_add`` of whole rows
    it is, negative rows refused as scatter_add refuses them (a simplify-stage pattern), or
    None; rows of one element stay apart (numpy's flat add is quicker)."""
    from ..ops.indexing import INDEX_ADD
    from ..ops.shape import EXPAND, RESHAPE
    if e.params["dim"] != 0:
        return None
    a, index, src = e.inputs
    wide = producer.get(index)
    flat = producer.get(wide.inputs[0]) if wide is not None and wide.prim is EXPAND else None
    if flat is None or flat.prim is not RESHAPE or not isinstance(flat.inputs[0], Var):
        return None
    rows, ash = flat.inputs[0], tuple(a.aval.shape)
    if (len(rows.aval.shape) != 1 or any(d != 1 for d in flat.out.aval.shape[1:])
            or not all(type(d) is int for d in ash[1:]) or math.prod(ash[1:]) < 2 or tuple(src.aval.shape[1:]) != ash[1:]):
        return None
    row_add = Eqn(INDEX_ADD, (a, src, rows), e.outs, {"spec": (("t", 0),), "nonneg": True}, e.loc)
    return [row_add] if scatter_ok(row_add) else None


def attach_scatters(items: list, graph) -> list:
    """`items` with each row add `scatter_ok` takes made a scatter group: of the plain
    elementwise group computing its update where that is the group's one output and
    nothing else reads it, else of its own."""
    from .fusion import Group, _schedule
    made = {it.out: it for it in items if isinstance(it, Eqn) and len(it.outs) == 1}
    adds = [it for it in items if scatter_ok(it)]
    if not adds:
        return items
    from ..ops.creation import FULL
    results = {a for a in graph.outputs if isinstance(a, Var)}
    items = list(items)
    gid = 1 + max((it.gid for it in items if isinstance(it, Group)), default=-1)
    for e in adds:
        a, v, idx = e.inputs
        prod = next((it for it in items if isinstance(it, Group) and v in it.defined), None)
        reads = [it for it in items if it is not e and v in it.inputs]
        if (prod is not None and prod.outputs == [v] and not reads and v not in results
                and prod.reduction is None and not prod.rows and prod.window is None and prod.scatter is None
                and not getattr(prod, "reads", None) and tuple(prod.shape) == tuple(v.aval.shape)
                and a not in prod.inputs and idx not in prod.inputs):
            prod.scatter = e
            prod.inputs = [a, idx] + list(prod.inputs)
            prod.outputs = [e.out]
            items.remove(e)
        else:
            g = Group(gid, tuple(v.aval.shape), [], None, [a, v, idx], [e.out])
            g.scatter = e
            gid += 1
            items[items.index(e)] = g
            prod = g
        prod.nonneg_index = bool(e.params.get("nonneg"))
        fill = made.get(a)
        if (fill is not None and fill.prim is FULL and type(fill.params["value"]) in (int, float)
                and a not in results and not any(a in it.inputs for it in items if it is not prod)):
            # (a base of one value, an embedding gradient's zeros: written by the kernel, not read)
            items.remove(fill)
            prod.inputs.remove(a)
            prod.fill = fill.params["value"]
    return _schedule(items, graph)


# (the simplify stage's pattern, jit/patterns.py: registered where the scatter group is defined)
register(Pattern("rows_scatter_add", rows_scatter_add, ("simplify",), (SCATTER_ADD,)))
