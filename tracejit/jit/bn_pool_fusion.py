"""A compiled training forward's BatchNorm + max pooling as one record (ops/bn_pool.py).

After differentiation a training step's forward graph holds, for ``max_pool2d(bn(x))`` (with
the ReLU between already moved after the pooling: jit/passes.py `_pooled_relu_record`):

    r = batch_norm_forward(x, w, b)                 # normalized y, then the statistics
    s = getitem(r, [size:])  ...                    # the statistics (the gradient reads them)
    y = batch_norm_values(r, x, stats, w, b)        # y in x's shape
    R = max_pool2d_with_offsets(y)                  # pooled maxima and their offsets
    p = max_pool2d_values(R, y)                     # y: an operand for its shape only

When y is read by nothing else (the BatchNorm gradient reads x and the statistics, the pooling
gradient R's offsets; y is neither saved nor an output), `fuse` writes it as

    f = batch_norm_max_pool2d(x, w, b)              # R, then the statistics
    R = reshape(getitem(f, [:2*N*C*OH*OW]))
    s = getitem(f, [2*N*C*OH*OW:])  ...
    p = max_pool2d_values(R, x)                     # x has y's shape and dtype

so y is never stored: one pass over the conv output instead of two (LeNet's first BatchNorm
output, 5.5 MB, written and read back). The record's values and statistics are bitwise the
ones it replaces. It runs on forward graphs only after differentiation (the rewrite drops
batch_norm_values, which carries BatchNorm's VJP).

In a backward graph, BatchNorm's gradient of the pooling's scattered gradient (windows side
by side, the scattered gradient read by nothing else) becomes ``batch_norm_backward_pooled``
(`_fuse_backward`): the same record, the x-sized scattered gradient never stored.
``TRACEJIT_BN_POOL=0`` turns both off (the pattern's switch).
"""
from __future__ import annotations

from ..ops import bn_pool as _bn_pool
from ..ops.registry import Aval
from . import patterns as _patterns
from .ir import def_use, rewritten, Eqn, Graph, Var
from ..ops.batchnorm_prim import BATCH_NORM_FORWARD, BATCH_NORM_VALUES, BN_BACKWARD
from ..ops.indexing import GETITEM
from ..ops.shape import RESHAPE
from ..ops.pool_offsets import MAX_POOL2D_SCATTER, MAX_POOL2D_VALUES, MAX_POOL2D_WITH_OFFSETS

__all__ = ["fuse"]


def _slice_spec(e: Eqn, start: int):
    """The statistics' getitem spec ``((s, start, None, None),)`` when `e` is one (else None)."""
    spec = e.params.get("spec")
    if (e.prim is not GETITEM or len(e.inputs) != 1 or not isinstance(spec, tuple)
            or len(spec) != 1 or tuple(spec[0]) != ("s", start, None, None)):
        return None
    return spec


def fuse(g: Graph) -> Graph:
    """`g` with each fusable BatchNorm + max pooling record pair fused (module docstring)."""
    producer, users, outputs = def_use(g)
    replace: dict = {}     # id(eqn) -> equations written in its place ([] drops it)
    for e6 in g.eqns:
        if e6.prim is not MAX_POOL2D_WITH_OFFSETS:
            continue
        y = e6.inputs[0]
        e5 = producer.get(y)
        if e5 is None or e5.prim is not BATCH_NORM_VALUES or y in outputs:
            continue
        rec = e5.inputs[0]
        e1 = producer.get(rec)
        if e1 is None or e1.prim is not BATCH_NORM_FORWARD or rec in outputs:
            continue
        x, w, b = e1.inputs
        if not isinstance(x, Var) or len(x.aval.shape) != 4 or e5.inputs[1] is not x:
            continue
        y_users = users.get(y, [])
        e7s = [u for u in y_users if u is not e6]
        if (len(y_users) != 2 or len(e7s) != 1 or e7s[0].prim is not MAX_POOL2D_VALUES
                or e7s[0].inputs != (e6.out, y) or e7s[0].params != e6.params):
            continue
        n, c, h, wd = x.aval.shape
        if not all(isinstance(d, int) for d in (n, c, h, wd)):
            continue                      # symbolic sizes: left alone
        size = n * c * h * wd
        r_users = users.get(rec, [])
        e2s = [u for u in r_users if u is not e5]
        if len(r_users) != 2 or len(e2s) != 1 or _slice_spec(e2s[0], size) is None:
            continue
        if any(id(q) in replace for q in (e1, e2s[0], e5, e6, e7s[0])):
            continue
        e2, e7 = e2s[0], e7s[0]
        p = e6.params
        pshape = e6.out.aval.shape
        psize = 1
        for d in pshape:
            psize *= d
        f = Var(Aval((psize + 2 * c,), x.aval.dtype, x.aval.device))
        flat = Var(Aval((psize,), x.aval.dtype, x.aval.device))
        replace[id(e1)] = [
            Eqn(_bn_pool.BATCH_NORM_MAX_POOL2D, (x, w, b), (f,),
                {"eps": e1.params["eps"], "kernel": p["kernel"], "stride": p["stride"],
                 "padding": p["padding"], "dilation": p["dilation"]}, e6.loc),
            Eqn(e2.prim, (f,), (flat,), dict(e2.params, spec=(("s", 0, psize, None),)), e6.loc),
            Eqn(RESHAPE, (flat,), e6.outs, {"shape": tuple(pshape)}, e6.loc),
            Eqn(e2.prim, (f,), e2.outs, dict(e2.params, spec=(("s", psize, None, None),)), e2.loc),
        ]
        replace[id(e2)] = []
        replace[id(e5)] = []
        replace[id(e6)] = []
        replace[id(e7)] = [Eqn(e7.prim, (e6.out, x), e7.outs, dict(e7.params), e7.loc)]
    _fuse_backward(g, producer, users, outputs, replace)
    return rewritten(g, replace)


def _fuse_backward(g: Graph, producer: dict, users: dict, outputs: set, replace: dict) -> None:
    """``batch_norm_backward(max_pool2d_scatter(gp, R), x, stats, w)`` (the scattered gradient
    read by nothing else, windows side by side) as ``batch_norm_backward_pooled(gp, R, x,
    stats, w)``: the same record (ops/bn_pool.py), the scattered gradient never stored."""
    for e in g.eqns:
        if e.prim is not BN_BACKWARD:
            continue
        gy = e.inputs[0]
        s = producer.get(gy)
        if (s is None or s.prim is not MAX_POOL2D_SCATTER or gy in outputs
                or len(users.get(gy, [])) != 1 or id(s) in replace or id(e) in replace):
            continue
        p = s.params
        if not (tuple(p["kernel"]) == tuple(p["stride"]) and tuple(p["padding"]) == (0, 0)
                and tuple(p["dilation"]) == (1, 1)):
            continue
        gp, rec = s.inputs
        x, stats, w = e.inputs[1:]
        if not isinstance(x, Var) or len(x.aval.shape) != 4 or tuple(p["input_shape"]) != tuple(x.aval.shape):
            continue
        replace[id(s)] = []
        replace[id(e)] = [Eqn(_bn_pool.BN_BACKWARD_POOLED, (gp, rec, x, stats, w), e.outs,
                              {"eps": e.params["eps"], "kernel": p["kernel"], "stride": p["stride"],
                               "padding": p["padding"], "dilation": p["dilation"]}, e.loc)]


# A pattern of the compiled training step's graphs after differentiation (jit/patterns.py)
_patterns.register(_patterns.Pattern("bn_pool", fuse, ("forward", "backward"), switch="TRACEJIT_BN_POOL"))
