"""``nn.utils.parametrize``: a module's parameter computed from others on every access,
as PyTorch's: ``register_parametrization(module, "weight", P)`` keeps the original value as
``module.parametrizations.weight.original`` (or ``original0``, ``original1``, ... when P's
``right_inverse`` returns several tensors) and makes ``module.weight`` read ``P(original)``.

The module's class becomes a subclass (``ParametrizedLinear``) with a property for each
parametrized name, so ``isinstance`` checks still hold and state_dict names are PyTorch's.
The parametrization's ops are ordinary tensor ops: autograd, tracing and compiled forwards
see them as they see the layer's own.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from ...autograd.grad_mode import no_grad
from ...tensor import Tensor
from ..containers import ModuleDict, ModuleList
from ..module import Module
from ..parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached",
           "type_before_parametrizations", "ParametrizationList"]

_CACHE: dict | None = None     # (id(module), name) -> value while `cached()` is active


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """Within the block each parametrized tensor is computed once, at its first access."""
    global _CACHE
    outer = _CACHE
    _CACHE = {} if outer is None else outer
    try:
        yield
    finally:
        _CACHE = outer


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the original value(s)."""

    def __init__(self, modules, original: Tensor, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    try:
                        new = m.right_inverse(new)
                    except NotImplementedError:   # taken as the identity, as PyTorch does
                        pass
        self.is_tensor = isinstance(new, Tensor)
        if self.is_tensor:
            if new is not original:
                if tuple(new.shape) != tuple(original.shape) and not unsafe:
                    raise ValueError(f"register_parametrization: right_inverse changed the shape "
                                     f"from {tuple(original.shape)} to {tuple(new.shape)}")
                original = Parameter(new.detach(), requires_grad=original.requires_grad) \
                    if tuple(new.shape) != tuple(original.shape) else _assigned(original, new)
            self.register_parameter("original", _as_param(original))
        else:
            if not isinstance(new, (tuple, list)) or not all(isinstance(t, Tensor) for t in new):
                raise ValueError("register_parametrization: right_inverse must return a tensor or a "
                                 f"sequence of tensors, got {type(new).__name__}")
            self.ntensors = len(new)
            for i, t in enumerate(new):
                self.register_parameter(f"original{i}",
                                        Parameter(t.detach(), requires_grad=original.requires_grad))

    def right_inverse(self, value: Tensor) -> None:
        """Set the original(s) so that the parametrized value becomes `value`."""
        with no_grad():
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    value = m.right_inverse(value)
                elif not self.unsafe:
                    raise RuntimeError(f"parametrization {type(m).__name__} does not implement "
                                       f"right_inverse, so the parametrized tensor can't be assigned")
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self) -> Tensor:
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in list(self)[1:]:
            x = m(x)
        return x


def _as_param(t: Tensor) -> Parameter:
    return t if isinstance(t, Parameter) else Parameter(t.detach(), requires_grad=t.requires_grad)


def _assigned(original: Tensor, new: Tensor) -> Tensor:
    with no_grad():
        original.copy_(new)
    return original


def _property(name: str) -> property:
    def get(self):
        plist = self.parametrizations[name]
        if _CACHE is None:
            return plist()
        key = (id(self), name)
        if key not in _CACHE:
            _CACHE[key] = plist()
        return _CACHE[key]

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)
    return property(get, set_)


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has parametrizations (for `tensor_name`, when given)."""
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def type_before_parametrizations(module: Module) -> type:
    """The module's class before its first parametrization."""
    cls = type(module)
    return cls.__bases__[0] if getattr(cls, "_parametrized_class", False) else cls


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` read ``parametrization(original)``; returns `module`."""
    if not isinstance(parametrization, Module):
        raise TypeError(f"register_parametrization: the parametrization must be an nn.Module, got "
                        f"{type(parametrization).__name__}")
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    original = getattr(module, tensor_name, None)
    if not isinstance(original, Tensor):
        raise ValueError(f"register_parametrization: module {type(module).__name__} has no parameter "
                         f"or buffer named {tensor_name!r}")
    if not unsafe:
        with no_grad():
            out = parametrization(original)
        if not isinstance(out, Tensor) or tuple(out.shape) != tuple(original.shape) \
                or out.dtype != original.dtype:
            raise ValueError(f"register_parametrization: {type(parametrization).__name__} must return "
                             f"a tensor of the original's shape {tuple(original.shape)} and dtype "
                             f"{original.dtype} (pass unsafe=True to allow otherwise)")
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"_parametrized_class": True})
    module.parametrizations[tensor_name] = plist
    setattr(type(module), tensor_name, _property(tensor_name))
    return module


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo `register_parametrization` for `tensor_name`: the tensor becomes a parameter again,
    holding its parametrized value (or the original, with ``leave_parametrized=False``)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"remove_parametrizations: module {type(module).__name__} has no "
                         f"parametrization on {tensor_name!r}")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name)
        if plist.is_tensor and tuple(value.shape) == tuple(plist.original.shape):
            param = _assigned(plist.original, value)
        else:
            param = Parameter(value.detach(), requires_grad=True)
    elif plist.is_tensor:
        param = plist.original
    else:
        raise ValueError("remove_parametrizations: leave_parametrized=False needs a parametrization "
                         "with a single original tensor")
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    module.register_parameter(tensor_name, _as_param(param))
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type_before_parametrizations(module)
    return module
