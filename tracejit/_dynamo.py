"""``torch._dynamo``'s names that training scripts touch, mapped onto tracejit's compiler.

Scripts write ``torch._dynamo.config.cache_size_limit = 64``, ``torch._dynamo.reset()``
or ``torch._dynamo.config.suppress_errors = True``. Here:

- ``config.cache_size_limit`` / ``config.recompile_limit`` set the captures a compiled
  function keeps before new signatures run eagerly (tracejit.compile's ``recompile_limit``
  default, for functions compiled afterwards);
- ``config.suppress_errors`` is what ``fullgraph=False`` already does (a function that
  cannot be captured runs eagerly, with one warning); other config names are accepted
  and have no effect;
- ``reset()`` forgets every capture (``tracejit.compiler.reset``); ``mark_dynamic`` is a
  hint only: a dim that changes between calls becomes symbolic at its second size anyway;
- ``disable``, ``allow_in_graph``, ``is_compiling``, ``explain`` and ``optimize`` forward to
  tracejit.compiler / tracejit.compile.
"""
from __future__ import annotations

import sys as _sys

from typing import Any, Callable, Optional

__all__ = ["config", "reset", "mark_dynamic", "mark_static", "maybe_mark_dynamic", "disable",
           "allow_in_graph", "is_compiling", "explain", "optimize", "graph_break"]


class _Config:
    """Attribute bag; the two recompile-limit names write tracejit's default."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {"suppress_errors": False, "verbose": False,
                                             "automatic_dynamic_shapes": True, "assume_static_by_default": True,
                                             "capture_scalar_outputs": False, "optimize_ddp": True})

    def __getattr__(self, name: str) -> Any:
        if name in ("cache_size_limit", "recompile_limit"):
            from .jit import function
            return function.DEFAULT_RECOMPILE_LIMIT
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"torch._dynamo.config has no setting {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("cache_size_limit", "recompile_limit"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"torch._dynamo.config.{name} must be an int >= 1, got {value!r}")
            from .jit import function
            function.DEFAULT_RECOMPILE_LIMIT = value
            return
        self._values[name] = value


config = _Config()
# ``import torch.<this>.config`` at a script's top: the settings object under that path
__path__: list = []
_sys.modules[__name__ + ".config"] = config


def reset() -> None:
    from .compiler import reset as _reset
    _reset()


def mark_dynamic(t, index, *, min: Optional[int] = None, max: Optional[int] = None) -> None:  # noqa: A002
    """A hint only (see the module docstring): returns None and changes nothing."""
    return None


mark_static = maybe_mark_dynamic = mark_dynamic


def disable(fn: Optional[Callable] = None, recursive: bool = True):
    from .compiler import disable as _disable
    return _disable(fn, recursive)


def allow_in_graph(fn: Callable) -> Callable:
    return fn


def graph_break() -> None:
    """Nothing to split: a capture keeps going as one graph, with the same values."""


def is_compiling() -> bool:
    from .compiler import is_compiling as _is
    return _is()


def explain(fn: Callable, *args, **kwargs):
    from .jit import explain as _explain
    return _explain(fn, *args, **kwargs) if args or kwargs else (lambda *a, **k: _explain(fn, *a, **k))


def optimize(backend: Any = "inductor", *, nopython: bool = False, dynamic: Optional[bool] = None, **_: Any):
    """The legacy decorator factory: ``torch._dynamo.optimize("inductor")(fn)``."""
    from .jit import compile as _compile
    return lambda fn: _compile(fn, backend=backend if isinstance(backend, str) else None,
                               fullgraph=nopython, dynamic=dynamic)
