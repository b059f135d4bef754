"""The CPU kernels of primitives that have a rows form, rendered by the rows-group renderer.

Some row ops stay primitives (an eager softmax is one call and a few numpy passes in
place, where its composite is five ops forward and about ten passes backward), but
their kernel is no hand-written loop: the primitive's record gives its *rows form*
(``prim.extra["rows_form"]``, the same function written with keepdim reductions over the
last dim and elementwise ops), which is traced, scheduled as one rows group
(compiler/fusion.py), lowered (compiler/loopnest.py) and rendered by the CPU backend
(compiler/codegen_cpu_rows.py): a compiled program's rows group and the primitive's
kernel are one lowering. Loaded with loader.py's policy (compiled in the background
workers; the primitive's numpy form runs until the kernel is loaded, sync mode loads
or compiles it in the call).

A kernel is made per primitive, dtype, params, variant (serial below
``threads.PARALLEL_MIN`` elements, else ``prange`` over the rows) and the pattern of
size-1 dims of the operands (what broadcasts); the sizes are the kernel's arguments.
Operands are passed C-contiguous (a copy where they are not), as the row kernels took
them.
"""
from __future__ import annotations

import numpy as np

from ....ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD
from ....threads import PARALLEL_MIN
from .loader import kernel as _kernel

__all__ = ["run", "on_last_dim", "softmax", "softmax_backward"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_UNSUPPORTED = object()
_forms: dict = {}    # kernel key -> (graph input positions, nest) once rendered, or _UNSUPPORTED


def on_last_dim(x, *rest, dim, **params) -> bool:
    """A checker (ops/impls.py): the op reduces over the last dim, as a rows group does."""
    return dim == x.ndim - 1


def _key(prim, arrays, params, parallel):
    pattern = tuple(tuple(d == 1 for d in a.shape) for a in arrays)
    return ("rows", prim.name, arrays[0].dtype.name, pattern,
            tuple(sorted(params.items())), parallel)


def run(prim, arrays, params):
    """`prim`'s result on numpy `arrays` (one float dtype, the first the widest) by the
    kernel rendered from its rows form, or None (not such arrays, the form is no single
    rows group, or the kernel is not loaded yet: the caller's numpy form runs)."""
    x = arrays[0]
    dt = x.dtype
    if dt not in _DTYPES or x.ndim == 0 or x.size == 0:
        return None
    for a in arrays:
        if type(a) is not np.ndarray or a.dtype != dt:
            return None
    parallel = x.size >= PARALLEL_MIN
    key = _key(prim, arrays, params, parallel)
    shapes = [a.shape for a in arrays]
    k = _kernel(key, lambda: _render(key, prim, shapes, dt.name, params, parallel))
    fn = k.get()
    if fn is None:
        return None
    form = _forms.get(key)
    if form is None or form is _UNSUPPORTED:
        return None
    positions, nest = form
    args = []
    for pos, op in zip(positions, nest.operands):
        a = np.ascontiguousarray(arrays[pos])
        args.append(a.reshape(-1) if op.layout == "scalar" else a)
    outs = [np.empty(x.shape, o.dtype) if not o.row else np.empty(x.shape[:-1] + (1,), o.dtype)
            for o in nest.outputs]
    fn(*args, *outs, *x.shape)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _render(key, prim, shapes, dtype: str, params, parallel: bool):
    """The rendered kernel's spec; records the nest (for the call's operands) in `_forms`.
    Raises where the rows form is not one rows group over the first operand's shape (the
    loader then keeps the numpy form)."""
    from .... import dtypes
    from ....jit.tracer import trace_graph
    from ....ops.registry import Aval
    from ... import backends, fusion, loopnest
    try:
        avals = [Aval(s, getattr(dtypes, dtype)) for s in shapes]
        form = prim.extra["rows_form"]
        ctx, out = trace_graph(lambda *xs: form(*xs, **params), avals)
        graph = ctx.graph([out._var])
        items = fusion.partition(graph)
        if len(items) != 1 or not isinstance(items[0], fusion.Group) or not items[0].rows:
            raise ValueError(f"{prim.name}'s rows form is not one rows group")
        group = items[0]
        if tuple(group.shape) != tuple(shapes[0]) or list(group.outputs) != list(graph.outputs):
            raise ValueError(f"{prim.name}'s rows form writes other values than its result")
        positions = [list(graph.inputs).index(v) for v in group.inputs]
        nest = loopnest.lower(group, loopnest.operand_layouts(group))
    except Exception:
        _forms[key] = _UNSUPPORTED
        raise
    _forms[key] = (positions, nest)
    return backends.get("cpu").render(nest, parallel)


# ---------------------------------------------------------------- the primitives' implementations
# (registered by compiler/cpu/implementations.py: the primitive's arrays and params in, its
# result out, or None while the kernel is not loaded and the numpy form runs)
def softmax(x, *mask, dim, scale=1.0):
    return run(SOFTMAX, (x,) + mask, {"dim": dim, "scale": scale})


def softmax_backward(g, y, dim, scale=1.0):
    return run(SOFTMAX_BACKWARD, (g, y), {"dim": dim, "scale": scale}) if g.shape == y.shape else None
