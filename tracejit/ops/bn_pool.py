"""Training-mode BatchNorm's backward of a max pooling's scattered gradient as one record.

``batch_norm_backward_pooled(gp, rec, x, stats, weight, eps, kernel, stride, padding,
dilation)`` is exactly ``batch_norm_backward(max_pool2d_scatter(gp, rec, x.shape), x, stats,
weight, eps)`` (ops/batchnorm_prim.py, ops/pool_offsets.py) for windows side by side, and
that composition is its numpy form. Not differentiable: a compiled backward plan takes it
(jit/bn_pool_fusion.py) where the scattered gradient is read by nothing else, so that
x-sized gradient is never stored and read back. Its forward counterpart is no record: the
statistics, normalization, ReLU and pooling are one channel group of the general path
(compiler/codegen_cpu_channels.py, jit/batchnorm_split.py).
"""
from __future__ import annotations

from . import batchnorm_prim as _bn
from . import pool_offsets as _po
from .registry import defprim
from .eager import bind

__all__ = ["batch_norm_backward_pooled"]


# ---------------------------------------------------------------- the backward
# batch_norm_backward_pooled(gp, rec, x, stats, weight, eps, geometry) -> batch_norm_backward's
# record of the gradient max_pool2d_scatter(gp, rec) for windows side by side (kernel ==
# stride, no padding or dilation: each input position in at most one window). Per channel
# the kernel writes the scattered gradient straight into the channel's block of the output
# (channel-major, as batch_norm_backward's), sums it as that kernel does (the same blocks in
# the same order: bitwise the same sums), then turns the block in place into the input
# gradient: the pooling's gradient (x's size: LeNet's first, 5.5 MB) is never stored and
# read back. The numpy form is the composition.
def _backward_rule(gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    _po._scatter_rule(gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
    return _bn._backward_rule(x, x, stats, weight, eps)


def _backward_impl(xp, gp, rec, x, stats, weight, eps, kernel, stride, padding, dilation):
    g = _po._scatter_impl(xp, gp, rec, tuple(x.shape), kernel, stride, padding, dilation)
    return _bn._backward_impl(xp, g, x, stats, weight, eps)


BN_BACKWARD_POOLED = defprim("batch_norm_backward_pooled", _backward_impl, _backward_rule, None,
                             kind="other")


def batch_norm_backward_pooled(gp, rec, x, stats, weight, eps: float, kernel, stride,
                               padding=(0, 0), dilation=(1, 1)):
    """batch_norm_backward's record (input gradient channel-major, then the two sums) for the
    gradient ``max_pool2d_scatter(gp, rec, x.shape)``; not differentiable (a compiled
    backward plan's op, jit/bn_pool_fusion.py)."""
    return bind(BN_BACKWARD_POOLED, gp, rec, x, stats, weight, eps=float(eps), kernel=tuple(kernel),
                stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
