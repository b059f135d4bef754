"""The JIT front end: ``trace``, ``script``, guards and cache, eager and check modes.

Capture (tracer, script, control, loops, scalars) produces the IR (ir); IR-to-IR work
(passes, autodiff) and the reference interpreter live beside it. A `CompiledFunction`
(function, capture, entry, guards) caches entries whose executors come from a backend
through backend.py, the one door to compiler/ (which imports this package, never the
reverse). This module holds the decorators and the compiled-module wrapper.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

from . import config
from .config import eager
from .explain import explain
from .function import CompiledFunction
from .loops import scan

__all__ = ["trace", "script", "eager", "explain", "CompiledFunction", "scan"]

config.configure_logging()


def _decorate(mode: str, fn, kw):
    if fn is None:
        return functools.partial(_decorate, mode) if not kw else (lambda f: _decorate(mode, f, kw))
    if _is_module(fn):
        return _wrap_module(mode, fn, kw)
    return CompiledFunction(fn, mode=mode, **kw)


def _is_module(x) -> bool:
    try:
        from ..nn import Module
    except ImportError:
        return False
    return isinstance(x, Module)


class CompiledModule:
    """A module whose forward is compiled; everything else is the wrapped module's.

    Module methods that return the module itself (``train()``, ``eval()``, ``to()``...)
    return this wrapper, so ``model = model.eval()`` keeps the compiled forward.
    """

    def __init__(self, module, forward: CompiledFunction):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "forward", forward)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __getattr__(self, name):
        attr = getattr(self._orig_mod, name)
        if inspect.ismethod(attr) and attr.__self__ is self._orig_mod:
            orig = self._orig_mod

            @functools.wraps(attr)
            def method(*args, **kwargs):
                out = attr(*args, **kwargs)
                return self if out is orig else out
            return method
        return attr

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def cache_stats(self) -> dict:
        return self.forward.cache_stats()

    def explain(self, *args, **kwargs):
        return self.forward.explain(*args, **kwargs)

    def compile(self, *args, **kwargs) -> None:
        """Compile the forward for these example inputs now (see CompiledFunction.compile)."""
        return self.forward.compile(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Compiled{self._orig_mod!r}"


def _wrap_module(mode: str, module, kw):
    def named_tensors():
        names = {id(b): n for n, b in module.named_buffers()}
        names.update({id(p): n for n, p in module.named_parameters()})
        return names

    forward = type(module).forward
    cf = CompiledFunction(forward, mode=mode, bound_self=module, extra_guard=_TrainingGuard(module),
                          tensor_names=named_tensors, **kw)
    cf.__name__ = type(module).__name__ + ".forward"
    cf.__qualname__ = type(module).__qualname__ + ".forward"
    return CompiledModule(module, cf)


class _TrainingGuard:
    """Guards a capture on the train/eval flag of every submodule (dropout and friends
    read it while tracing, so a graph is only valid for the flags it was captured with)."""

    def __init__(self, module):
        self.module = module

    def snapshot(self) -> "_FlagsCheck":
        named = list(self.module.named_modules())
        return _FlagsCheck([n or type(self.module).__name__ for n, _ in named], [m for _, m in named])


class _FlagsCheck:
    def __init__(self, names, mods):
        self.names = names
        self.mods = mods
        self.flags = [m.training for m in mods]

    def __call__(self) -> bool:
        for m, f in zip(self.mods, self.flags):
            if m.training != f:
                return False
        return True

    def text(self) -> str:
        return "training flags: " + ", ".join(f"{n}={f}" for n, f in zip(self.names, self.flags))

    def describe(self) -> list:
        return [f"module {n!r}: training guard failed: {f} -> {m.training}"
                for n, m, f in zip(self.names, self.mods, self.flags) if m.training != f]


def trace(fn: Optional[Callable] = None, *, eager: bool = False, check: bool = False,
          recompile_limit: int = 8, dynamic: Optional[bool] = None, compiler: Optional[str] = "numba",
          compile: Optional[str] = None):
    """Compile `fn` by tracing it; Python values are specialized under guards."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler,
              compile=compile)
    if fn is None:
        return lambda f: _decorate("trace", f, kw)
    return _decorate("trace", fn, kw)


def script(fn: Optional[Callable] = None, *, eager: bool = False, check: bool = False,
           recompile_limit: int = 8, dynamic: Optional[bool] = None, compiler: Optional[str] = "numba",
           compile: Optional[str] = None):
    """Compile `fn` keeping its control flow: if/while/for on tensors or scalar arguments
    become graph ops, and scalar arguments are runtime inputs."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler,
              compile=compile)
    if fn is None:
        return lambda f: _decorate("script", f, kw)
    return _decorate("script", fn, kw)
