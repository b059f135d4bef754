"""A compiled training backward's BatchNorm gradient of a max pooling's scattered gradient
as one record (ops/bn_pool.py).

``batch_norm_backward(max_pool2d_scatter(gp, R), x, stats, w)`` with the scattered gradient
read by nothing else and windows side by side becomes ``batch_norm_backward_pooled(gp, R,
x, stats, w)``: the same values, the x-sized scattered gradient never stored. (The forward
needs no record: BatchNorm, ReLU and the pooling are one channel group of the general path,
jit/batchnorm_split.py.) ``TRACEJIT_BN_POOL=0`` turns it off (the pattern's switch).
"""
from __future__ import annotations

from ..ops import bn_pool as _bn_pool
from . import patterns as _patterns
from .ir import def_use, rewritten, Eqn, Graph, Var
from ..ops.batchnorm_prim import BN_BACKWARD
from ..ops.pool_offsets import MAX_POOL2D_SCATTER

__all__ = ["fuse"]


def fuse(g: Graph) -> Graph:
    """`g` with each fusable BatchNorm gradient of a pooling's scatter fused (module docstring)."""
    producer, users, outputs = def_use(g)
    replace: dict = {}     # id(eqn) -> equations written in its place ([] drops it)
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


# A pattern of the compiled training step's backward graphs (jit/patterns.py)
_patterns.register(_patterns.Pattern("bn_pool", fuse, ("backward",), switch="TRACEJIT_BN_POOL"))
