"""The JIT front end: ``trace``, ``script``, guards and cache, eager and check modes."""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from . import config
from .config import eager
from .explain import explain
from .function import CompiledFunction

__all__ = ["trace", "script", "eager", "explain", "CompiledFunction"]

config.configure_logging()


def _decorate(mode: str, fn, kw):
    if fn is None:
        return functools.partial(_decorate, mode, **{}) if not kw else (lambda f: _decorate(mode, f, kw))
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
    """A module whose forward is compiled; everything else is the wrapped module's."""

    def __init__(self, module, forward: CompiledFunction):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "forward", forward)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def cache_stats(self) -> dict:
        return self.forward.cache_stats()

    def explain(self, *args, **kwargs):
        return self.forward.explain(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Compiled{self._orig_mod!r}"


def _wrap_module(mode: str, module, kw):
    mods = list(module.modules())

    def training_unchanged(flags=tuple(m.training for m in mods)):
        return tuple(m.training for m in mods) == flags
    # Guard on the train/eval flags of every submodule (read by dropout etc. at trace time).
    forward = type(module).forward
    cf = CompiledFunction(forward, mode=mode, bound_self=module,
                          extra_guard=_TrainingGuard(mods), **kw)
    cf.__name__ = type(module).__name__ + ".forward"
    return CompiledModule(module, cf)


class _TrainingGuard:
    def __init__(self, mods):
        self.mods = mods
        self.flags = tuple(m.training for m in mods)

    def __call__(self) -> bool:
        for m, f in zip(self.mods, self.flags):
            if m.training is not f:
                # Flags changed: remember the new set so the next capture guards on it.
                self.flags = tuple(x.training for x in self.mods)
                return False
        return True


def trace(fn: Optional[Callable] = None, *, eager: bool = False, check: bool = False,
          recompile_limit: int = 8, dynamic: Optional[bool] = None, compiler: Optional[str] = "numba"):
    """Compile `fn` by tracing it; Python values are specialized under guards."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler)
    if fn is None:
        return lambda f: _decorate("trace", f, kw)
    return _decorate("trace", fn, kw)


def script(fn: Optional[Callable] = None, *, eager: bool = False, check: bool = False,
           recompile_limit: int = 8, dynamic: Optional[bool] = None, compiler: Optional[str] = "numba"):
    """Compile `fn` keeping its control flow: if/while/for on tensors or scalar arguments
    become graph ops, and scalar arguments are runtime inputs."""
    kw = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic, compiler=compiler)
    if fn is None:
        return lambda f: _decorate("script", f, kw)
    return _decorate("script", fn, kw)
