"""The JIT front end: ``trace``, ``script``, guards and cache, eager and check modes.

Capture (tracer, script, control, loops, scalars) produces the IR (ir); IR-to-IR work
(passes, autodiff) and the reference interpreter live beside it. A `CompiledFunction`
(function, capture, entry, guards) caches entries whose executors come from a backend
through backend.py, the one door to compiler/ (which imports this package, never the
reverse). This module holds the decorators; ``compile`` (torch.compile's entry) is in
compile_api.py, the wrapper a compiled ``nn.Module`` becomes in compiled_module.py.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

from . import config
from .archive import load, save
from .compile_api import compile
from . import compiled_module as _compiled_module  # noqa: F401  (installs Module.compile)
from .config import eager
from .explain import explain
from .function import CompiledFunction, compiled_function_of
from .loops import scan
from .torchscript import (Attribute, Error, Final, Future, ScriptFunction, ScriptModule, _overload, _overload_method,  # noqa: F401
                          annotate, export, fork, freeze, ignore, interface, is_scripting, is_tracing, script_if_tracing,
                          optimize_for_inference, unused, wait)

__all__ = ["trace", "script", "compile", "eager", "explain", "CompiledFunction", "scan", "save", "load"]

config.configure_logging()


def __getattr__(name: str):
    """``tracejit.jit.isinstance`` (torchscript.py), kept out of this module's globals, where
    it would stand in for the builtin."""
    if name == "isinstance":
        from .torchscript import isinstance as typed_isinstance
        return typed_isinstance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _decorate(mode: str, fn, kw):
    if fn is None:
        return functools.partial(_decorate, mode) if not kw else (lambda f: _decorate(mode, f, kw))
    from ..nn import Module
    if isinstance(fn, Module):
        from .compiled_module import wrap_module
        return wrap_module(mode, fn, kw)
    return CompiledFunction(fn, mode=mode, **kw)


def trace(fn: Optional[Callable] = None, example_inputs=None, *, example_kwarg_inputs: Optional[dict] = None,
          eager: bool = False, check: bool = False, recompile_limit: Optional[int] = None, dynamic: Optional[bool] = None,
          compiler: Optional[str] = "numba", compile: Optional[str] = None):
    """Compile `fn` by tracing it; Python values are specialized under guards.

    ``trace(model, example_inputs)`` (``torch.jit.trace``'s form: a tuple of arguments or
    one tensor, plus ``example_kwarg_inputs``) also captures the entry those inputs need,
    now, without running the model or waiting for kernels."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler,
              compile=compile)
    examples = example_inputs is not None or example_kwarg_inputs is not None
    if example_kwarg_inputs is not None and not isinstance(example_kwarg_inputs, dict):
        raise TypeError(f"trace: example_kwarg_inputs must be a dict, got {type(example_kwarg_inputs).__name__}")
    if fn is None:
        if examples:
            raise TypeError("trace: example inputs were given without the function or module to trace")
        return lambda f: _decorate("trace", f, kw)
    out = _decorate("trace", fn, kw)
    if examples:
        args = example_inputs if isinstance(example_inputs, tuple) else \
            (() if example_inputs is None else (example_inputs,))
        compiled_function_of(out).capture(*args, **(example_kwarg_inputs or {}))
    return out


def script(fn: Optional[Callable] = None, *, eager: bool = False, check: bool = False,
           recompile_limit: Optional[int] = None, dynamic: Optional[bool] = None, compiler: Optional[str] = "numba",
           compile: Optional[str] = None):
    """Compile `fn` keeping its control flow: if/while/for on tensors or scalar arguments
    become graph ops, and scalar arguments are runtime inputs."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler,
              compile=compile)
    if fn is None:
        return lambda f: _decorate("script", f, kw)
    return _decorate("script", fn, kw)
