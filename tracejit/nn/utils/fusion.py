"""Weight normalization, skip_init, and folding an eval-mode BatchNorm into the convolution
or linear layer before it (``torch.nn.utils``'s helpers of the same names)."""
from __future__ import annotations

import copy

from ... import ops as _ops
from ...autograd.grad_mode import no_grad
from ..parameter import Parameter

__all__ = ["weight_norm", "remove_weight_norm", "skip_init", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
           "fuse_linear_bn_eval", "fuse_linear_bn_weights", "convert_conv2d_weight_memory_format",
           "convert_conv3d_weight_memory_format"]


def _norm_except(v, dim):
    """||v|| over every dim but `dim` (all of them when dim is None), kept for broadcasting."""
    if dim is None:
        return (v * v).sum() ** 0.5
    d = dim % v.ndim
    dims = tuple(i for i in range(v.ndim) if i != d)
    return (v * v).sum(dims, keepdim=True) ** 0.5


class _WeightNorm:
    def __init__(self, name: str, dim):
        self.name, self.dim = name, dim

    def compute(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / _norm_except(v, self.dim))

    def __call__(self, module, inputs):
        object.__setattr__(module, self.name, self.compute(module))


def weight_norm(module, name: str = "weight", dim=0):
    """Reparameterize ``module.<name>`` as g * v / ||v|| (PyTorch's ``weight_norm``): the
    module gets parameters ``<name>_g`` and ``<name>_v``; the weight is recomputed from them
    before every forward."""
    w = getattr(module, name)
    if dim == -1:
        dim = None
    hook = _WeightNorm(name, dim)
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(_norm_except(w.detach(), dim)))
    module.register_parameter(name + "_v", Parameter(w.detach()))
    object.__setattr__(module, name, hook.compute(module))
    handle = module.register_forward_pre_hook(hook)
    module.__dict__.setdefault("_weight_norm_hooks", {})[name] = (hook, handle)
    return module


def remove_weight_norm(module, name: str = "weight"):
    hooks = module.__dict__.get("_weight_norm_hooks", {})
    if name not in hooks:
        raise ValueError(f"weight_norm of '{name}' not found in {module}")
    hook, handle = hooks.pop(name)
    w = hook.compute(module).detach()
    handle.remove()
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.__dict__.pop(name, None)
    module.register_parameter(name, Parameter(w))
    return module


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
