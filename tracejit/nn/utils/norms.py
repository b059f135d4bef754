"""``nn.utils.weight_norm`` and ``nn.utils.spectral_norm``: PyTorch's older forms, which
rename the parameter (``weight_g``/``weight_v``; ``weight_orig`` with ``weight_u``/``weight_v``
buffers) and recompute the weight in a forward pre-hook. The same arithmetic as the
parametrizations in ``parametrizations.py``; state_dict names are PyTorch's."""
from __future__ import annotations

from ... import ops
from ...ops.normalization_more import normalize as _normalize
from ...autograd.grad_mode import no_grad
from ..module import Module
from ..parameter import Parameter
from .parametrizations import _matrix, norm_except_dim

__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]


class _WeightNormHook:
    _traceable = True   # its effects are tensor writes a graph replays (jit/side_effects.py)
    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    def compute(self, module: Module):
        g, v = getattr(module, self.name + "_g"), getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, 2, self.dim))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute(module))


class _SpectralNormHook:
    _traceable = True
    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        self.name, self.n, self.dim, self.eps = name, n_power_iterations, dim, eps

    def compute(self, module: Module, power_iteration: bool):
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = _matrix(weight, self.dim)
        if power_iteration:
            with no_grad():
                m = mat.detach()
                for _ in range(self.n):
                    v.copy_(_normalize(ops.mv(m.t(), u), dim=0, eps=self.eps))
                    u.copy_(_normalize(ops.mv(m, v), dim=0, eps=self.eps))
            u, v = u.clone(), v.clone()
        return weight / ops.dot(u, ops.mv(mat, v))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute(module, module.training))


def _hook_of(module: Module, kind: type, name: str, what: str):
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, kind) and hook.name == name:
            return key, hook
    raise ValueError(f"{what} of '{name}' not found in {type(module).__name__}")


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Replace ``module.<name>`` by ``<name>_g`` (magnitude) and ``<name>_v`` (direction)."""
    dim = -1 if dim is None else dim
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _WeightNormHook) and hook.name == name:
            raise RuntimeError(f"weight_norm: cannot register two weight_norm hooks on the same "
                               f"parameter {name}")
    weight = getattr(module, name)
    hook = _WeightNormHook(name, dim)
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, dim).detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    setattr(module, name, hook.compute(module))
    module.register_forward_pre_hook(hook)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: ``module.<name>`` is a parameter holding the current weight again."""
    key, hook = _hook_of(module, _WeightNormHook, name, "weight_norm")
    with no_grad():
        weight = hook.compute(module).detach()
    del module._forward_pre_hooks[key]
    delattr(module, name)
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Divide ``module.<name>`` by its largest singular value (power iteration in training
    forwards); the parameter becomes ``<name>_orig`` with buffers ``<name>_u``, ``<name>_v``."""
    if n_power_iterations <= 0:
        raise ValueError(f"spectral_norm: n_power_iterations must be positive, got {n_power_iterations}")
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, _SpectralNormHook) and hook.name == name:
            raise RuntimeError(f"spectral_norm: cannot register two spectral_norm hooks on the same "
                               f"parameter {name}")
    if dim is None:
        dim = 1 if type(module).__name__ in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d") else 0
    weight = getattr(module, name)
    hook = _SpectralNormHook(name, n_power_iterations, dim, eps)
    h, w = _matrix(weight, dim).shape
    u = _normalize(ops.randn(h, dtype=weight.dtype), dim=0, eps=eps)
    v = _normalize(ops.randn(w, dtype=weight.dtype), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(hook)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: ``module.<name>`` is a parameter holding the normalized weight."""
    key, hook = _hook_of(module, _SpectralNormHook, name, "spectral_norm")
    with no_grad():
        weight = hook.compute(module, False).detach()
    del module._forward_pre_hooks[key]
    delattr(module, name)
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_u"], module._buffers[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module
