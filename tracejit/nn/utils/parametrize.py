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
        shape, dtype = tuple(original.shape), original.dtype
        with no_grad():
            new = original
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    try:
                        new = m.right_inverse(new)
                    except NotImplementedError:   # taken as the identity, as PyTorch does
                        pass
        # (a parameter's originals are parameters, a buffer's buffers, as PyTorch's)
        kept = isinstance(original, Parameter)
        register = self.register_parameter if kept else self.register_buffer
        self.is_tensor = isinstance(new, Tensor)
        if self.is_tensor:
            if new.dtype != dtype:
                raise ValueError(f"register_parametrization: when right_inverse returns one tensor it may not "
                                 f"change the dtype ({dtype} to {new.dtype})")
            if new is not original:
                original = _assigned(original, new) if tuple(new.shape) == shape else _like(new, original)
            register("original", original)
            self.ntensors = 1
        else:
            if not isinstance(new, (tuple, list)) or not all(isinstance(t, Tensor) for t in new):
                raise ValueError("register_parametrization: right_inverse must return a tensor or a "
                                 f"sequence of tensors, got {type(new).__name__}")
            self.ntensors = len(new)
            for i, t in enumerate(new):
                register(f"original{i}", _like(t, original))
        if not unsafe:
            with no_grad():
                _check_value(self(), shape, dtype, type(self[0]).__name__)

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


def _like(t: Tensor, original: Tensor) -> Tensor:
    """`t`'s values as what `original` is: a parameter, or a buffer (detached)."""
    if isinstance(original, Parameter):
        return Parameter(t.detach(), requires_grad=original.requires_grad)
    return t.detach().requires_grad_(original.requires_grad)


def _check_value(out, shape: tuple, dtype, name: str) -> None:
    if not isinstance(out, Tensor) or tuple(out.shape) != shape or out.dtype != dtype:
        got = (f"shape {tuple(out.shape)} and dtype {out.dtype}" if isinstance(out, Tensor)
               else type(out).__name__)
        raise ValueError(f"register_parametrization: {name} must return a tensor of the original's shape "
                         f"{shape} and dtype {dtype}, got {got} (pass unsafe=True to allow otherwise)")


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
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            with no_grad():
                current = getattr(module, tensor_name)
                _check_value(parametrization(current), tuple(current.shape), current.dtype,
                             type(parametrization).__name__)
        plist.append(parametrization)
        plist.unsafe |= unsafe
        return module
    original = getattr(module, tensor_name, None)
    if not isinstance(original, Tensor):
        raise ValueError(f"register_parametrization: module {type(module).__name__} has no parameter "
                         f"or buffer named {tensor_name!r}")
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
    first = plist.original if plist.is_tensor else plist.original0
    if leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name)
        if plist.is_tensor and tuple(value.shape) == tuple(plist.original.shape):
            kept = _assigned(plist.original, value)
        else:
            kept = _like(value, first)
    elif plist.is_tensor:
        kept = plist.original
    else:
        raise ValueError("remove_parametrizations: leave_parametrized=False needs a parametrization "
                         "with a single original tensor")
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(first, Parameter):
        module.register_parameter(tensor_name, kept)
    else:
        module.register_buffer(tensor_name, kept)
    if not is_parametrized(module):
        del module.parametrizations
        module.__class__ = type_before_parametrizations(module)
    return module
