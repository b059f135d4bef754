"""skip_init, and folding an eval-mode BatchNorm into the convolution
or linear layer before it (``torch.nn.utils``'s helpers of the same names)."""
from __future__ import annotations

import copy

from ... import ops as _ops
from ...autograd.grad_mode import no_grad
from ..parameter import Parameter

__all__ = ["skip_init", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
           "fuse_linear_bn_eval", "fuse_linear_bn_weights", "convert_conv2d_weight_memory_format",
           "convert_conv3d_weight_memory_format"]


def skip_init(module_cls, *args, **kwargs):
    """The module built as usual (tracejit has no meta device to skip its initialisation on)."""
    kwargs.pop("device", None)
    return module_cls(*args, **kwargs)


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose: bool = False):
    if conv_b is None:
        conv_b = _ops.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = _ops.ones_like(bn_rm)
    if bn_b is None:
        bn_b = _ops.zeros_like(bn_rm)
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    shape = (1, -1) + (1,) * (conv_w.ndim - 2) if transpose else (-1, 1) + (1,) * (conv_w.ndim - 2)
    w = conv_w * scale.reshape(shape)
    b = (conv_b - bn_rm) * scale + bn_b
    return Parameter(w.detach(), conv_w.requires_grad), Parameter(b.detach(), conv_b.requires_grad)


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    if conv.training or bn.training:
        raise ValueError("fuse_conv_bn_eval: only for modules in eval mode")
    fused = copy.deepcopy(conv)
    with no_grad():
        fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean,
                                                        bn.running_var, bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    if linear_b is None:
        linear_b = _ops.zeros_like(bn_rm)
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    w = linear_w * scale.unsqueeze(-1)
    b = (linear_b - bn_rm) * scale + bn_b
    return Parameter(w.detach(), linear_w.requires_grad), Parameter(b.detach(), linear_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    if linear.training or bn.training:
        raise ValueError("fuse_linear_bn_eval: only for modules in eval mode")
    fused = copy.deepcopy(linear)
    with no_grad():
        fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean,
                                                          bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused


def convert_conv2d_weight_memory_format(module, memory_format):
    """The module unchanged: tracejit's convolutions choose their own layouts."""
    return module


def convert_conv3d_weight_memory_format(module, memory_format):
    return module
