"""TorchScript's annotations, as public model code (torchvision, timm) writes them around
plain Python: tracejit runs that Python as it is, so each is what PyTorch's is outside
scripting — ``is_scripting()`` is False, the decorators give the function itself,
``annotate`` its value — and a compiled forward traces straight through them."""
from __future__ import annotations

import builtins
import collections
import typing

from .._path_modules import path_module

__all__ = ["is_scripting", "is_tracing", "annotate", "ignore", "unused", "export", "interface",
           "script_if_tracing", "Final", "_overload", "_overload_method", "ScriptModule", "ScriptFunction",
           "Future", "fork", "wait", "freeze", "optimize_for_inference", "Error", "Attribute", "isinstance"]

Final = typing.Final


def is_scripting() -> bool:
    """False: nothing here runs as TorchScript (``if torch.jit.is_scripting():`` branches
    take their Python side)."""
    return False


def is_tracing() -> bool:
    """False, as under torch.compile: the TorchScript tracer's special cases do not apply."""
    return False


def annotate(the_type, the_value):
    """The value (TorchScript's type hint for an empty container)."""
    return the_value


class Error(Exception):
    """``torch.jit.Error``: what a TorchScript ``raise`` becomes (for ``except`` clauses)."""


Attribute = collections.namedtuple("Attribute", ["value", "type"])   # (as torch's outside scripting)


def isinstance(obj, target_type) -> bool:  # noqa: A001  (torch.jit's name)
    """``torch.jit.isinstance``: ``isinstance`` that also checks ``List[int]``,
    ``Dict[str, Tensor]``, ``Tuple[...]`` and ``Optional[...]`` element by element."""
    origin, args = typing.get_origin(target_type), typing.get_args(target_type)
    if origin is None:
        return builtins.isinstance(obj, target_type)
    if origin is typing.Union:
        return any(isinstance(obj, a) for a in args)
    if not builtins.isinstance(obj, origin):
        return False
    if origin is dict:
        return all(isinstance(k, args[0]) and isinstance(v, args[1]) for k, v in obj.items())
    if origin is tuple:
        return len(obj) == len(args) and all(isinstance(v, a) for v, a in zip(obj, args))
    return all(isinstance(v, args[0]) for v in obj) if args else True


def _as_is(fn):
    return fn


unused = export = interface = script_if_tracing = _overload = _overload_method = _as_is


def ignore(drop=False, **kwargs):
    """``@ignore`` or ``@ignore(drop=True)``: the function itself."""
    return drop if callable(drop) else _as_is


class ScriptModule:
    """For ``isinstance`` checks: no model here is a TorchScript module."""


class ScriptFunction:
    """For ``isinstance`` checks: no function here is a TorchScript function."""


class Future:
    """``torch.jit.fork``'s result: the call already ran (tracejit runs no TorchScript
    tasks in parallel); ``wait()`` gives its value."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value

    value = wait

    def done(self) -> bool:
        return True


def fork(func, *args, **kwargs) -> Future:
    """``func(*args, **kwargs)`` run now, as a `Future` for `wait`."""
    return Future(func(*args, **kwargs))


def wait(future: Future):
    return future.wait()


def freeze(mod, preserved_attrs: typing.Optional[list] = None, optimize_numerics: bool = True):
    """``torch.jit.freeze``: a copy of `mod` (a scripted or traced module, in eval mode)
    whose parameters need no gradient, as torch's folded constants: its graph is captured
    without a backward and its outputs do not require grad. (A compiled module reads its
    parameters as guarded constants already; nothing else is folded.)"""
    from .function import compiled_function_of
    if compiled_function_of(mod) is None:
        raise RuntimeError("Freezing expects a ScriptModule as input. Please use torch.jit.script or "
                           f"torch.jit.trace to script your 'nn.Module' (got {type(mod).__name__})")
    if mod.training:
        raise RuntimeError("Freezing is currently only implemented for modules in eval mode. "
                           "Please call .eval() on your module before freezing.")
    for name in preserved_attrs or ():
        if not hasattr(mod, name):
            raise RuntimeError(f"freeze: preserved_attrs names {name!r}, which the module does not have")
    import copy
    frozen = copy.deepcopy(mod)
    for p in frozen.parameters():
        p.requires_grad_(False)
    return frozen


def optimize_for_inference(mod, other_methods: typing.Optional[list] = None):
    """``torch.jit.optimize_for_inference``: `freeze` (a module in training mode is put in
    eval mode first, as torch's is frozen)."""
    from .function import compiled_function_of
    if compiled_function_of(mod) is not None and mod.training:
        mod.eval()
    return freeze(mod)


def _assert(condition, message):
    """``torch._assert``: Python's assert, which a traced condition may not be."""
    assert condition, message


def _log_api_usage_once(event: str) -> None:
    """What torchvision's models call in ``__init__``: PyTorch's usage logging, a no-op here."""


_C = path_module("tracejit._C", "``torch._C``: the names public model code calls.",
                 {"_log_api_usage_once": _log_api_usage_once})
