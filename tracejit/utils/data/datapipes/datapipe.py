"""The DataPipe base classes, `DataChunk`, and the decorators: ``functional_datapipe``
(register a pipe class under a method name), ``argument_validation`` and
``runtime_validation`` (check arguments and yielded items against the pipes' type
parameters, ``IterDataPipe[int]``), ``non_deterministic`` with
``guaranteed_datapipes_determinism``."""
from __future__ import annotations

import functools
import inspect
import threading
import typing
from typing import Any, Callable, Generic, TypeVar

from ..dataset import Dataset, IterableDataset

__all__ = ["DataChunk", "DFIterDataPipe", "IterDataPipe", "MapDataPipe", "argument_validation",
           "functional_datapipe", "guaranteed_datapipes_determinism", "non_deterministic",
           "runtime_validation", "runtime_validation_disabled"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _Flags(threading.local):
    validate = True          # runtime_validation checks items (runtime_validation_disabled: off)
    deterministic = False    # guaranteed_datapipes_determinism: non-deterministic pipes refuse


_flags = _Flags()


class _Functional:
    """Registration of functional names shared by both pipe kinds."""
    functions: dict = {}

    def __getattr__(self, name: str):
        fn = type(self).functions.get(name)
        if fn is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return functools.partial(fn, self)

    @classmethod
    def register_function(cls, function_name: str, function: Callable) -> None:
        cls.functions[function_name] = function

    @classmethod
    def register_datapipe_as_function(cls, function_name: str, cls_to_register,
                                      enable_df_api_tracing: bool = False) -> None:
        if function_name in cls.functions:
            raise Exception(f"Unable to add DataPipe function name {function_name} as it is already taken")

        def fn(source, *args, **kwargs):
            return cls_to_register(source, *args, **kwargs)
        cls.functions[function_name] = fn

    def reset(self) -> None:
        """Start the pipe's iteration afresh (nothing to do for a pipe that keeps no state)."""

    def __repr__(self) -> str:
        return type(self).__qualname__


class IterDataPipe(_Functional, IterableDataset, Generic[T_co]):
    """An iterable dataset whose functional names (``.map``, ``.batch``...) build pipes."""
    functions: dict = {}


class DFIterDataPipe(IterDataPipe):
    """An IterDataPipe of data frames."""

    def _is_dfpipe(self) -> bool:
        return True


class MapDataPipe(_Functional, Dataset, Generic[T_co]):
    """A map-style dataset (``__getitem__`` and ``__len__``) whose functional names build pipes."""
    functions: dict = {}


class DataChunk(list, Generic[T]):
    """A batch of a pipe's items (a list): what ``.batch`` yields."""

    def __init__(self, items=()):
        items = list(items)
        super().__init__(items)
        self.items = items

    def as_str(self, indent: str = "") -> str:
        return indent + "[" + ", ".join(str(i) for i in iter(self)) + "]"

    def __iter__(self):
        yield from super().__iter__()

    def raw_iterator(self):
        yield from self.items


def copy_if(source, deepcopy: bool):
    """A deep copy of `source` when `deepcopy` and it can be copied (a generator cannot)."""
    if deepcopy:
        import copy
        try:
            return copy.deepcopy(source)
        except TypeError:
            pass
    return source


class functional_datapipe:  # noqa: N801  (PyTorch's name)
    """Class decorator: ``@functional_datapipe("name")`` makes ``dp.name(...)`` build the
    decorated pipe with ``dp`` as its source."""

    def __init__(self, name: str, enable_df_api_tracing: bool = False) -> None:
        self.name = name
        self.enable_df_api_tracing = enable_df_api_tracing

    def __call__(self, cls):
        if issubclass(cls, IterDataPipe):
            IterDataPipe.register_datapipe_as_function(self.name, cls, self.enable_df_api_tracing)
        elif issubclass(cls, MapDataPipe):
            MapDataPipe.register_datapipe_as_function(self.name, cls)
        else:
            raise TypeError(f"functional_datapipe: {cls.__name__} is not an IterDataPipe or MapDataPipe")
        return cls


class guaranteed_datapipes_determinism:  # noqa: N801
    """Inside the block, building a pipe marked ``non_deterministic`` raises TypeError."""

    def __enter__(self):
        self._prev, _flags.deterministic = _flags.deterministic, True
        return self

    def __exit__(self, *exc):
        _flags.deterministic = self._prev
        return False


def non_deterministic(arg):
    """Mark a pipe class as non-deterministic, or, given a function of the constructor's
    arguments, as non-deterministic when that function says so."""
    def guard(cls, decide):
        init = cls.__init__

        @functools.wraps(init)
        def checked(self, *args, **kwargs):
            if _flags.deterministic and decide(*args, **kwargs):
                raise TypeError(f"{cls.__name__} is non-deterministic, but you set "
                                f"'guaranteed_datapipes_determinism'")
            init(self, *args, **kwargs)
        cls.__init__ = checked
        return cls
    if isinstance(arg, type):
        return guard(arg, lambda *a, **k: True)
    if not callable(arg):
        raise TypeError(f"non_deterministic: expected a DataPipe class or a function, got {type(arg).__name__}")
    return lambda cls: guard(cls, arg)


class runtime_validation_disabled:  # noqa: N801
    """Inside the block, ``runtime_validation`` checks nothing."""

    def __enter__(self):
        self._prev, _flags.validate = _flags.validate, False
        return self

    def __exit__(self, *exc):
        _flags.validate = self._prev
        return False


def _item_type(pipe) -> Any:
    """The T of ``class P(IterDataPipe[T])``, or None when the class does not say."""
    for klass in type(pipe).__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) in (IterDataPipe, MapDataPipe):
                args = typing.get_args(base)
                return args[0] if args else None
    return None


def _matches(value, hint) -> bool:
    if hint is None or hint is Any or isinstance(hint, TypeVar):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return any(_matches(value, h) for h in typing.get_args(hint))
    if origin is not None:
        return isinstance(value, origin) if isinstance(origin, type) else True
    return isinstance(value, hint) if isinstance(hint, type) else True


def runtime_validation(f):
    """Decorate an ``__iter__``: each item it yields must be of the pipe's item type."""
    if f.__name__ != "__iter__":
        raise TypeError(f"Can not decorate function {f.__name__} with 'runtime_validation'")

    @functools.wraps(f)
    def wrapper(self):
        hint = _item_type(self)
        for item in f(self):
            if _flags.validate and not _matches(item, hint):
                raise RuntimeError(f"Expected an instance as subtype of {hint}, but found {item}({type(item)})")
            yield item
    return wrapper


def argument_validation(f):
    """Decorate a pipe's ``__init__``: an argument annotated with a DataPipe type must be one."""
    sig = inspect.signature(f)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        hints = typing.get_type_hints(f)
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            kind = typing.get_origin(hint) or hint
            if isinstance(kind, type) and issubclass(kind, (IterDataPipe, MapDataPipe)):
                if not isinstance(value, kind):
                    raise TypeError(f"Expected argument '{name}' as a {kind.__name__}, but found "
                                    f"{type(value).__name__}")
                want = typing.get_args(hint)
                got = _item_type(value)
                if want and got is not None and isinstance(got, type) and isinstance(want[0], type) \
                        and not issubclass(got, want[0]):
                    raise TypeError(f"Expected type of argument '{name}' as a subtype of hint {hint}, "
                                    f"but found {got}")
        return f(*args, **kwargs)
    return wrapper
