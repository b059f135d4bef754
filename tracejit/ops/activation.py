"""Composite activations: elu, selu, celu, mish, hardtanh, relu6, hardsigmoid, hardswish, prelu.

Written with primitives only (gradients, tracing and fusion come for free) and with
PyTorch's signatures; ``inplace=True`` writes the result into the input with
``copy_``, as PyTorch's in-place variants do (`apply_inplace`).
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..errors import ArgumentError, ShapeError
from .composite import softplus
from .elementwise import CLAMP, clamp, tanh, where
from .registry import bind
from .hardswish_prim import hardsigmoid as _hardsigmoid, hardswish as _hardswish
from .silu_elu_prim import elu as _elu
from .shape import clone, reshape
from ..autograd.grad_mode import is_grad_enabled
from ..tensor import Tensor
from ..tensor_inplace import can_take, take_value
from . import autocast as _autocast
from .dtype_checks import takes
from .opmath import opmath

__all__ = ["elu", "selu", "celu", "mish", "hardtanh", "relu6", "hardsigmoid", "hardswish", "prelu"]

_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def apply_inplace(input, fn, inplace: bool = True):
    """``fn(input)``, written into `input` when `inplace`. When nothing else sees
    `input`'s memory, `input` takes over the result's (`take_value`: no copy, and what
    `fn`'s gradient saved stays as it read it); else, while autograd records, `fn` reads a
    copy (its gradient saves what it read, and `input`'s memory is overwritten next) and
    the result is copied in."""
    if not inplace:
        return fn(input)
    grad = input.requires_grad and is_grad_enabled()
    if grad and input.grad_fn is not None and can_take(input):
        # `fn` reads an alias of input's array (a new tensor of the same history), so its
        # nodes keep the old value while input takes the new one
        src = _alias(input)
        out = fn(src)
        if take_value(input, out, aliases=1):
            return input
        del out     # (its nodes read src, whose memory the copy below would overwrite)
        src = clone(input)
    elif grad:
        src = clone(input)
    else:
        src = input
        out = fn(src)
        if take_value(input, out):
            return input
        return input.copy_(out)
    return input.copy_(fn(src))


def _alias(t):
    """A tensor of `t`'s array, history and version, not tied to `t`'s later versions."""
    a = Tensor._wrap(t._data, t.dtype, t.device)
    a._requires_grad = t._requires_grad
    a.grad_fn = t.grad_fn
    a._output_nr = t._output_nr
    a._vbox = [t._vbox[0]]
    return a


@takes("input")
def elu(input, alpha: float = 1.0, inplace: bool = False):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    return apply_inplace(input, lambda x: _elu(x, alpha), inplace)


@takes("input")
def selu(input, inplace: bool = False):
    """scale * elu(x, alpha) with the self-normalizing constants."""
    return apply_inplace(input, lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE), inplace)


@takes("input")
def celu(input, alpha: float = 1.0, inplace: bool = False):
    """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    return apply_inplace(input, lambda x: _elu(x, alpha, 1.0, 1.0 / alpha), inplace)


_MISH = opmath(lambda x: x * tanh(softplus(x)))


@takes("input")
def mish(input, inplace: bool = False):
    """x * tanh(softplus(x))."""
    return apply_inplace(input, _MISH, inplace)


@takes("input", ints=True)
def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """x clamped to [min_val, max_val]; an integer tensor in its own dtype, the bounds
    truncated toward zero (PyTorch's integer kernel)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    if input.dtype.is_integer:
        if input.dtype is _dt.uint8 and min(min_val, max_val) < 0:
            raise ArgumentError(f"hardtanh: cannot do hardtanh on an unsigned type with negative "
                                f"limits (min_val {min_val}, max_val {max_val})")
        min_val, max_val = int(min_val), int(max_val)
        return apply_inplace(input, lambda x: clamp(x, min_val, max_val), inplace)
    # clamp whose gradient is 0 at the bounds too (PyTorch's hardtanh_backward; clamp's passes it)
    return apply_inplace(input, lambda x: bind(CLAMP, x, min=min_val, max=max_val, open=True), inplace)


def relu6(input, inplace: bool = False):
    return hardtanh(input, 0.0, 6.0, inplace)


@takes("input")
def hardsigmoid(input, inplace: bool = False):
    """clamp(x / 6 + 1/2, 0, 1)."""
    return apply_inplace(input, _hardsigmoid, inplace)


@takes("input")
def hardswish(input, inplace: bool = False):
    """x * hardsigmoid(x)."""
    return apply_inplace(input, _hardswish, inplace)


@takes("input")
@_autocast.lower
def prelu(input, weight):
    """x for x > 0, weight * x otherwise; weight has 1 or C (= input.shape[1]) entries."""
    n = weight.numel()
    if weight.ndim > 1:
        raise ShapeError(f"prelu: weight must be 0-D or 1-D, got shape {tuple(weight.shape)}")
    if n != 1:
        cdim = 1 if input.ndim >= 2 else 0
        if input.ndim == 0 or input.shape[cdim] != n:
            raise ShapeError(f"prelu: weight has {n} parameters but input of shape {tuple(input.shape)} "
                             f"has {input.shape[cdim] if input.ndim else 'no'} channels (dim {cdim})")
        weight = reshape(weight, (-1,) + (1,) * (input.ndim - cdim - 1))
    return where(input > 0, input, weight * input)
