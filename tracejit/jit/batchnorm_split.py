"""A compiled training step's BatchNorm as per-channel sums and elementwise work.

After differentiation a training step's forward graph holds, for ``bn(x)`` (ops/batchnorm_prim.py):

    r = batch_norm_forward(x, w, b)                 # normalized y, then the statistics
    s = getitem(r, [size:])  ...                    # the statistics (the gradient reads them)
    y = batch_norm_values(r, x, stats, w, b)        # y in x's shape

`split` writes an (N, C, H, W) one as per-channel sums and elementwise ops (`_channel_form`)

    m = sum(x, (0, 2, 3), keepdim) / count; v = sum((x - m)**2, ...) / count
    y = (x - m) * (w * rsqrt(v + eps)) + b
    t = cat(m, v)                                   # the statistics the others read
    s = getitem(t, [0:])  ...

which the scheduler makes one channel group (compiler/fusion.py, codegen_cpu_channels.py):
per channel the sums, then y, with a ReLU or LeakyReLU after it, and a pooling whose input
nothing else reads as the group's last pass, so y is never written (compiler/windows.py).
Values match the record's to rounding (the sums run in another order). Other ranks become

    t = reshape(batch_norm_stats(x), (2*C,))        # one pass over x: the statistics alone
    a = w / sqrt(var + eps); d = b - mean * a       # per channel, in float64, then x's dtype
    y = x * a + d                                   # elementwise

the record's values bit for bit. It runs on forward graphs only after differentiation (it
drops batch_norm_values, which carries BatchNorm's VJP; the backward reads x and the
statistics, not y).

`split_backward`, on the backward graph, writes each (N, C, H, W) ``batch_norm_backward``
record as its channel form too (ops/batchnorm_prim.py `backward_form`): one channel group
that folds sum g and sum g*(x - mean) per channel in one pass and writes the input
gradient in the next, channel-major (compiler/windows.py `channel_major_outputs`), as the
record's head was, so the convolution backward after it reads its rows with no copy.
``TRACEJIT_BN_SPLIT=0`` turns both off (the patterns' switch).
"""
from __future__ import annotations

from . import patterns as _patterns
from .ir import def_use, rewritten, Eqn, Graph, Var
from ..ops.batchnorm_prim import (BATCH_NORM_FORWARD, BATCH_NORM_STATS, BATCH_NORM_VALUES, BN_BACKWARD,
                                  backward_form, forward_form)
from ..ops.indexing import GETITEM
from ..ops.registry import Aval
from ..ops.shape import RESHAPE

__all__ = ["split", "split_backward"]

_FLOATS = ("float32", "float64")


def _tail_spec(e: Eqn, size: int):
    """`e`'s getitem spec moved back by `size` when `e` slices the record's tail
    (``((s, start >= size, None, None),)``), else None."""
    spec = e.params.get("spec")
    if (e.prim is not GETITEM or len(e.inputs) != 1 or not isinstance(spec, tuple)
            or len(spec) != 1 or len(spec[0]) != 4 or spec[0][0] != "s"
            or not isinstance(spec[0][1], int) or spec[0][1] < size
            or spec[0][2] is not None or spec[0][3] is not None):
        return None
    return (("s", spec[0][1] - size, None, None),)


def _normalize(x, stats, weight, bias, eps: float):
    """``x * a + d`` with a = weight * rsqrt(var + eps), d = bias - mean * a per channel,
    computed in float64 and rounded to x's dtype (batch_norm_forward's kernel and numpy form)."""
    from ..ops.elementwise import cast, sqrt
    from ..ops.shape import reshape
    from .. import dtypes
    f64 = dtypes.float64
    s = cast(stats, f64)
    mean, var = s[0], s[1]
    a = cast(weight, f64) / sqrt(var + eps)
    d = cast(bias, f64) - mean * a
    view = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return x * reshape(cast(a, x.dtype), view) + reshape(cast(d, x.dtype), view)


def _wide(*ts):
    """`ts` with bf16 ones widened to float32: a bf16 BatchNorm computes in float32, as its
    record's kernel does (compiler/cpu/kernels/channel_forms.py), the casts fusing into the
    channel group as loads and stores."""
    from .. import dtypes
    return tuple(t.float() if t.dtype is dtypes.bfloat16 else t for t in ts)


def _channel_form(x, weight, bias, eps: float, stats_dtype=None):
    """(y, the (2*C,) statistics) of training-mode BatchNorm over an (N, C, H, W) x by its
    channel form (ops/batchnorm_prim.py `forward_form`): one channel group, with a
    pooling after it as the group's last pass (compiler/windows.py). A bf16 x computes in
    float32, y rounded to bf16 once, the statistics given in `stats_dtype` (the record's)."""
    from ..ops.shape import cat, reshape
    c = x.shape[1]
    inv = 1.0 / (x.shape[0] * x.shape[2] * x.shape[3])
    xw, weight, bias = _wide(x, weight, bias)
    y, mean, var = forward_form(xw, reshape(weight, (1, c, 1, 1)), reshape(bias, (1, c, 1, 1)), inv, eps)
    stats = cat([reshape(mean, (c,)), reshape(var, (c,))])
    return y.to(x.dtype), stats.to(stats_dtype or x.dtype)


def _traced(fn, ins: tuple, outs: tuple, loc) -> list:
    """The equations of `fn` over the values `ins`, writing `outs`."""
    from .tracer import trace_graph
    ctx, res = trace_graph(fn, [v.aval for v in ins])
    res = res if isinstance(res, tuple) else (res,)
    sub = dict(zip(ctx.inputs, ins))
    if ctx.consts or ctx.captured:
        raise RuntimeError("batch_norm split: the normalization traced a constant")
    for r, o in zip(res, outs):
        sub[ctx.atom(r)] = o
    return [Eqn(e.prim, tuple(sub.get(a, a) if isinstance(a, Var) else a for a in e.inputs),
                tuple(sub.get(o, o) for o in e.outs), e.params, loc) for e in ctx.eqns]


def split(g: Graph) -> Graph:
    """`g` with each BatchNorm record split as the module docstring says."""
    producer, users, outputs = def_use(g)
    replace: dict = {}     # id(eqn) -> equations written in its place
    for e5 in g.eqns:
        if e5.prim is not BATCH_NORM_VALUES:
            continue
        rec, x, stats, w, b = e5.inputs
        e1 = producer.get(rec)
        if (e1 is None or e1.prim is not BATCH_NORM_FORWARD or rec in outputs or id(e1) in replace
                or e1.inputs[0] is not x or not all(isinstance(v, Var) for v in (x, stats, w, b))
                or x.aval.dtype.name not in _FLOATS + ("bfloat16",)):
            continue
        shape = x.aval.shape
        if x.aval.dtype.name == "bfloat16" and len(shape) != 4:
            continue                      # (the record's kernel computes it in float32)
        if not all(isinstance(d, int) for d in shape):
            continue                      # symbolic sizes: left alone
        size = rec.aval.shape[0] - 2 * shape[1]
        tails = [u for u in users.get(rec, []) if u is not e5]
        specs = [_tail_spec(u, size) for u in tails]
        if any(s is None for s in specs) or any(id(u) in replace for u in tails):
            continue
        c = shape[1]
        eps = e5.params["eps"]
        flat = Var(Aval((2 * c,), rec.aval.dtype, rec.aval.device))
        for u, spec in zip(tails, specs):
            replace[id(u)] = [Eqn(u.prim, (flat,), u.outs, dict(u.params, spec=spec), u.loc)]
        if len(shape) == 4:
            # all at the record's place (y's readers come after it), y's own equation dropped
            replace[id(e1)] = _traced(lambda *ts: _channel_form(*ts, eps, flat.aval.dtype), (x, w, b),
                                      (e5.out, flat), e1.loc)
            replace[id(e5)] = []
            continue
        st = Var(Aval((2, c), x.aval.dtype, x.aval.device))
        replace[id(e1)] = [Eqn(BATCH_NORM_STATS, (x,), (st,), {}, e1.loc),
                           Eqn(RESHAPE, (st,), (flat,), {"shape": (2 * c,)}, e1.loc)]
        replace[id(e5)] = _traced(lambda *ts: _normalize(*ts, eps), (x, stats, w, b), (e5.out,), e5.loc)
    return rewritten(g, replace)


def _backward_form(g, x, stats, weight, eps: float):
    """(the input gradient's (C*N*H*W,) channel-major run, the (2*C,) sums (sum g,
    sum g*xhat)) of batch_norm_backward over an (N, C, H, W) x by its channel form
    (`backward_form`): one channel group, the gradient written channel-major
    (windows.channel_major_outputs) so the convolution backward's GEMM reads its rows with
    no copy."""
    from ..ops.shape import cat, permute, reshape
    from ..ops.batchnorm_prim import _grad_dtype
    c = x.shape[1]
    view = (1, c, 1, 1)
    inv = 1.0 / (x.shape[0] * x.shape[2] * x.shape[3])
    dt = _grad_dtype(x.dtype, weight.dtype)     # (the record's: float32 under autocast)
    xdt = x.dtype
    g, x, stats, weight = _wide(g, x, stats, weight)
    gx, s0, s1 = backward_form(g, x, reshape(stats[0], view), reshape(stats[1], view), reshape(weight, view),
                               inv, eps)
    if xdt is not x.dtype and dt is x.dtype:
        # A bf16 x's gradient is bf16: rounded here, in the group, its float32 values are
        # what the convolution backward reads (bf16_graph.py drops the second rounding).
        gx = gx.to(xdt).to(dt)
    return (reshape(permute(gx, (1, 0, 2, 3)), (-1,)).to(dt),
            cat([reshape(s0, (c,)), reshape(s1, (c,))]).to(dt))


def _same_dtypes(ins) -> bool:
    """Whether a batch_norm_backward's operands share a float dtype, or are bf16 ones (a
    float32 weight or statistics beside them: autocast's), computed in float32."""
    names = {v.aval.dtype.name for v in ins}
    return (len(names) == 1 and names <= set(_FLOATS)) or (
        ins[1].aval.dtype.name == "bfloat16" and names <= {"bfloat16", "float32"})


def split_backward(g: Graph) -> Graph:
    """`g` with each batch_norm_backward record over an (N, C, H, W) value whose readers
    slice its head (the input gradient) and tail (the sums) written as `_backward_form`."""
    producer, users, outputs = def_use(g)
    replace: dict = {}
    for e in g.eqns:
        if e.prim is not BN_BACKWARD or len(e.inputs) != 4 or e.out in outputs:
            continue
        gr, x, stats, w = e.inputs
        shape = x.aval.shape
        if (not all(isinstance(v, Var) for v in e.inputs) or len(shape) != 4
                or not all(isinstance(d, int) for d in shape)
                or not _same_dtypes(e.inputs)):
            continue
        size = e.out.aval.shape[0] - 2 * shape[1]
        parts = {}
        for u in users.get(e.out, []):
            spec = u.params.get("spec") if u.prim is GETITEM else None
            part = {(("s", 0, size, None),): 0, (("s", size, None, None),): 1}.get(spec)
            if part is None or part in parts:
                break
            parts[part] = u
        else:
            dt, dev = e.out.aval.dtype, x.aval.device
            outs = tuple(parts[k].out if k in parts else Var(Aval((n,), dt, dev))
                         for k, n in ((0, size), (1, 2 * shape[1])))
            eps = e.params["eps"]
            replace[id(e)] = _traced(lambda *ts: _backward_form(*ts, eps), tuple(e.inputs), outs, e.loc)
            for u in parts.values():
                replace[id(u)] = []
    return rewritten(g, replace)


# Patterns of the compiled training step's graphs after differentiation (jit/patterns.py)
_patterns.register(_patterns.Pattern("bn_split", split, ("forward",), switch="TRACEJIT_BN_SPLIT"))
_patterns.register(_patterns.Pattern("bn_backward_split", split_backward, ("backward",),
                                     switch="TRACEJIT_BN_SPLIT"))
