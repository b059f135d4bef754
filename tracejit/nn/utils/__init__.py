"""``nn.utils``: gradient clipping, flattening parameters to one vector, weight and spectral
norm (hooks and parametrizations), pruning (``nn.utils.prune``), fusing BatchNorm into the
layer before it, and packed sequences (``nn.utils.rnn``)."""
from __future__ import annotations

import math
from typing import Iterable

from ...autograd.grad_mode import no_grad
from ...errors import ShapeError
from ...ops.eager import refuse_effect
from ...tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector", "vector_to_parameters"]


def _grads(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters: Iterable[Tensor] | Tensor, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale all gradients together so their joint norm is at most `max_norm`; returns the norm before."""
    grads = _grads(parameters)
    norm_type = float(norm_type)
    total = get_total_norm(grads, norm_type)
    t = total.item()
    if error_if_nonfinite and not math.isfinite(t):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the gradients "
                           f"is non-finite ({t}), so it cannot be clipped")
    coef = float(max_norm) / (t + 1e-6)
    if not coef >= 1.0:   # (a nan norm makes the gradients nan, as PyTorch's clamp does)
        for g in grads:
            g._data *= g._data.dtype.type(coef)
            g._vbox[0] += 1
    return total


def clip_grad_value_(parameters: Iterable[Tensor] | Tensor, clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value], in place.

    ``foreach`` (PyTorch's multi-tensor switch) is accepted and ignored, as in clip_grad_norm_."""
    clip_value = float(clip_value)
    refuse_effect("clip_grad_value_ clips the gradients in place")
    for g in _grads(parameters):
        xp = g._xp()
        xp.clip(g._data, -clip_value, clip_value, out=g._data)
        g._vbox[0] += 1


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    from ... import ops
    return ops.cat([ops.reshape(p, (-1,)) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of `vec` into the parameters (in place)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ShapeError(f"vector_to_parameters: expected a 1-D tensor of {total} elements, got shape "
                         f"{tuple(vec.shape)}")
    i = 0
    with no_grad():
        for p in params:
            n = p.numel()
            p.copy_(vec[i:i + n].reshape(p.shape))
            i += n


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None) -> Tensor:
    """The norm of the norms of `tensors` (as clip_grad_norm_ measures gradients)."""
    from ... import ops
    ts = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    norm_type = float(norm_type)
    if not ts:
        return ops.tensor(0.0)
    with no_grad():
        if norm_type == math.inf:
            per = [ops.amax(ops.abs(t.detach())) for t in ts]
            total = ops.amax(ops.stack(per)) if len(per) > 1 else per[0]
        else:
            per = [ops.norm(t.detach(), norm_type) for t in ts]
            total = ops.norm(ops.stack(per), norm_type) if len(per) > 1 else per[0]
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"get_total_norm: the total norm of order {norm_type} is non-finite")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm, foreach=None) -> None:
    """Scale the gradients by max_norm / (total_norm + 1e-6) where that is below 1."""
    refuse_effect("clip_grads_with_norm_ scales the gradients in place")
    grads = _grads(parameters)
    if not grads:   # (PyTorch looks at nothing else then)
        return
    if not isinstance(total_norm, Tensor) or total_norm.ndim != 0:   # (as PyTorch refuses)
        raise (ShapeError if isinstance(total_norm, Tensor) else TypeError)(
            f"clip_grads_with_norm_: total_norm must be a 0-d tensor (get_total_norm's result), got "
            f"{tuple(total_norm.shape) if isinstance(total_norm, Tensor) else type(total_norm).__name__}")
    coef = float(max_norm) / (float(total_norm) + 1e-6)
    if not coef >= 1.0:   # (a nan norm makes the gradients nan, as PyTorch's clamp does)
        for g in grads:
            g._data *= g._data.dtype.type(coef)
            g._vbox[0] += 1


from . import rnn  # noqa: E402,F401
from .fusion import *  # noqa: E402,F401,F403
from .fusion import __all__ as _fusion_all  # noqa: E402
from . import parametrizations, parametrize, prune, stateless  # noqa: E402,F401
from .norms import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm  # noqa: E402,F401
__all__ += ["get_total_norm", "clip_grads_with_norm_", "rnn", "parametrize", "parametrizations", "prune", "stateless",
            "weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"] + _fusion_all

clip_grad_norm = clip_grad_norm_   # PyTorch's deprecated spelling
__all__ += ["clip_grad_norm"]

# The submodule paths PyTorch keeps these under (``from torch.nn.utils.clip_grad import
# clip_grad_norm_``): modules of names only.
from ..._path_modules import path_module as _path_module  # noqa: E402

for _sub, _names in {"clip_grad": ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
                                   "clip_grads_with_norm_"),
                     "convert_parameters": ("parameters_to_vector", "vector_to_parameters"),
                     "init": ("skip_init",),
                     "memory_format": ("convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format")
                     }.items():
    globals()[_sub] = _path_module(f"{__name__}.{_sub}", f"``torch.nn.utils.{_sub}``'s names",
                                   {n: globals()[n] for n in _names})
del _sub, _names
