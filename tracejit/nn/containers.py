"""Containers: Sequential, ModuleList, ModuleDict, ParameterList."""
from __future__ import annotations

import itertools
import operator
from collections import OrderedDict
from collections.abc import Mapping
from typing import Iterable, Iterator

from .module import Module, _addindent, state_epoch
from .parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList"]


def _index(idx, n: int, what: str) -> int:
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"{what}: index {idx} is out of range for length {n}")
    return idx % n


def _renumber(container: Module, items: list) -> None:
    """Register `items` under the keys "0".."n-1", in order (PyTorch's numbering after a
    deletion or insertion). Moves the module state epoch, as a setattr does, so compiled
    modules look at their tree again."""
    state_epoch[0] += 1
    container._modules.clear()
    for i, m in enumerate(items):
        container._modules[str(i)] = m


class _ModuleSequence(Module):
    """What Sequential, ModuleList and ParameterList share: length, iteration over the
    values of the registry `_registry` names, append and extend (`_register`ed under the
    next number)."""

    _registry = "_modules"

    def __len__(self) -> int:
        return len(self.__dict__[self._registry])

    def __iter__(self) -> Iterator[Module]:
        return iter(self.__dict__[self._registry].values())

    def _register(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def append(self, module: Module):
        self._register(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]):
        for m in modules:
            self.append(m)
        return self


class Sequential(_ModuleSequence):
    """Chains modules: ``Sequential(a, b, c)(x) == c(b(a(x)))``; also takes an OrderedDict."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, m in args[0].items():
                self.add_module(key, m)
        else:
            for i, m in enumerate(args):
                if not isinstance(m, Module):
                    raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a Module")
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        keys = list(self._modules)
        return self._modules[keys[_index(idx, len(keys), "Sequential")]]

    def __setitem__(self, idx, module: Module) -> None:
        keys = list(self._modules)
        setattr(self, keys[_index(idx, len(keys), "Sequential")], module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        if isinstance(idx, slice):
            for k in keys[idx]:
                del self._modules[k]
        else:
            del self._modules[keys[_index(idx, len(keys), "Sequential")]]
        _renumber(self, list(self._modules.values()))

    def pop(self, key):
        """Remove the module (or slice of modules, as a Sequential) at `key` and return it."""
        v = self[key]
        del self[key]
        return v

    def __add__(self, other: "Sequential") -> "Sequential":
        """A new Sequential of self's modules, then other's (the same module objects)."""
        return Sequential().__iadd__(self).__iadd__(other)

    def __iadd__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but {type(other)} is given.")
        return self.extend(list(other))

    def __mul__(self, other: int) -> "Sequential":
        """A new Sequential of self's modules `other` times over (the same module objects)."""
        return Sequential().__iadd__(self).__imul__(other)

    __rmul__ = __mul__

    def __imul__(self, other: int) -> "Sequential":
        if not isinstance(other, int) or isinstance(other, bool):
            raise TypeError(f"unsupported operand type(s) for *: {type(self)} and {type(other)}")
        if other <= 0:
            raise ValueError(f"Non-positive multiplication factor {other} for {type(self)}")
        return self.extend(list(self) * (other - 1))

    def insert(self, index: int, module: Module) -> "Sequential":
        if not isinstance(module, Module):
            raise TypeError(f"Sequential.insert: expected a Module, got {type(module).__name__}")
        items = list(self._modules.values())
        n = len(items)
        if not -n <= index <= n:
            raise IndexError(f"Sequential.insert: index {index} is out of range for length {n}")
        items.insert(index + n if index < 0 else index, module)  # -1: before the last, as PyTorch
        _renumber(self, items)
        return self


class ModuleList(_ModuleSequence):
    """A list of modules, registered so their parameters are found."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx, module: Module) -> None:
        setattr(self, str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx) -> None:
        items = list(self._modules.values())
        if isinstance(idx, slice):
            del items[idx]
        else:
            del items[_index(idx, len(items), "ModuleList")]
        _renumber(self, items)

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        """A new ModuleList of self's modules, then other's (the same module objects)."""
        return ModuleList(list(self) + list(other))

    def pop(self, key):
        """Remove the module (or slice of modules, as a ModuleList) at `key` and return it."""
        v = self[key]
        del self[key]
        return v

    def __repr__(self) -> str:
        """Runs of modules with the same repr on one line each, as PyTorch's:
        ``(0-2): 3 x Linear(...)``."""
        lines, i = [], 0
        for text, run in itertools.groupby(repr(m) for m in self):
            n = len(list(run))
            key = f"({i}): " if n == 1 else f"({i}-{i + n - 1}): {n} x "
            lines.append(_addindent(key + text, 2))
            i += n
        return self._get_name() + ("(\n  " + "\n  ".join(lines) + "\n)" if lines else "()")

    def insert(self, index: int, module: Module) -> None:
        if not isinstance(module, Module):  # checked first: nothing changes on a bad module
            raise TypeError(f"ModuleList.insert: expected a Module, got {type(module).__name__}")
        items = list(self._modules.values())
        items.insert(operator.index(index), module)
        _renumber(self, items)


class _DictContainer(Module):
    """The dict interface of ModuleDict and ParameterDict, over the registry named by
    `_registry` (``_modules`` or ``_parameters``); subclasses define ``__setitem__``."""

    _registry = "_modules"

    def _d(self) -> OrderedDict:
        return self.__dict__[self._registry]

    def __getitem__(self, key: str):
        return self._d()[key]

    def __delitem__(self, key: str) -> None:
        state_epoch[0] += 1   # (a compiled module's guard looks at the tree again)
        del self._d()[key]

    def __len__(self) -> int:
        return len(self._d())

    def __iter__(self) -> Iterator[str]:
        return iter(self._d())

    def __contains__(self, key) -> bool:
        return key in self._d()

    def keys(self):
        return self._d().keys()

    def items(self):
        return self._d().items()

    def values(self):
        return self._d().values()

    def pop(self, key: str):
        state_epoch[0] += 1
        return self._d().pop(key)

    def clear(self) -> None:
        state_epoch[0] += 1
        self._d().clear()

    def update(self, items) -> None:
        pairs = items.items() if hasattr(items, "items") else items
        for key, value in pairs:
            self[key] = value


class ModuleDict(_DictContainer):
    """An ordered dict of modules keyed by string."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)


class ParameterList(_ModuleSequence):
    """A list of Parameters, registered under the names "0", "1", ..."""

    _registry = "_parameters"

    def __init__(self, values: Iterable[Parameter] | None = None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx) -> Parameter:
        if isinstance(idx, slice):
            return type(self)(list(self)[idx])
        return self._parameters[str(_index(idx, len(self), "ParameterList"))]

    def __setitem__(self, idx, param: Parameter) -> None:
        self._register(str(_index(idx, len(self), "ParameterList")), param)

    def _register(self, key: str, value) -> None:
        self.register_parameter(key, _as_param(value))

    __iadd__ = _ModuleSequence.extend

    def extra_repr(self) -> str:
        return _params_repr(enumerate(self))


def _as_param(v) -> Parameter:
    return v if isinstance(v, Parameter) else Parameter(v)


def _params_repr(pairs) -> str:
    return "\n".join(f"({k}): Parameter containing: [{p.dtype.name} of size {tuple(p.shape)}]"
                     for k, p in pairs)


class ParameterDict(_DictContainer):
    """A dict of Parameters, registered under their keys: in insertion order, but from a
    plain dict in sorted key order, as PyTorch's (which sets parameters() order, and so the
    indices of an optimizer's saved state)."""

    _registry = "_parameters"

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def update(self, parameters) -> None:
        if isinstance(parameters, Mapping) and not isinstance(parameters, (OrderedDict, ParameterDict)):
            parameters = sorted(parameters.items())
        super().update(parameters)

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_param(value))

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def setdefault(self, key: str, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def popitem(self) -> tuple:
        """The (key, parameter) registered last, removed."""
        key = next(reversed(self._parameters))
        return key, self.pop(key)

    def copy(self) -> "ParameterDict":
        """A new ParameterDict of the same parameters (the same objects), in the same order."""
        return ParameterDict(OrderedDict(self._parameters))

    def __reversed__(self) -> Iterator[str]:
        return reversed(list(self._parameters))

    def __or__(self, other) -> "ParameterDict":
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other) -> "ParameterDict":
        out = ParameterDict(other)
        out.update(self)
        return out

    def __ior__(self, other) -> "ParameterDict":
        self.update(other)
        return self

    def extra_repr(self) -> str:
        return _params_repr(self._parameters.items())


class Container(Module):
    """The deprecated base of containers: a Module whose keyword arguments are its children."""

    def __init__(self, **kwargs):
        super().__init__()
        for key, value in kwargs.items():
            self.add_module(key, value)
