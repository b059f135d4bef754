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
- ``disable``, ``allow_in_graph``, ``is_compiling``, ``set_stance`` and ``optimize`` forward
  to tracejit.compiler / tracejit.compile; ``explain(fn)(*args)`` compiles `fn`, calls it
  and reports its graphs and why a call could not be captured (an ``ExplainOutput``).
"""
from __future__ import annotations

import dataclasses
import sys as _sys

from typing import Any, Callable, Optional

from ._path_modules import path_module as _path_module
from .compiler import allow_in_graph, assume_constant_result, disable, is_compiling, list_backends, reset
from .jit.compiled_module import CompiledModule as OptimizedModule   # (isinstance checks; ``._orig_mod``)
from .jit.config import set_stance

__all__ = ["config", "reset", "mark_dynamic", "mark_static", "maybe_mark_dynamic", "disable",
           "allow_in_graph", "is_compiling", "explain", "optimize", "graph_break", "set_stance", "OptimizedModule",
           "list_backends", "disallow_in_graph", "assume_constant_result", "mark_static_address"]


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
eval_frame = _path_module(__name__ + ".eval_frame", "``torch._dynamo.eval_frame``: the compiled module's class.",
                          {"OptimizedModule": OptimizedModule})
# ``import torch.<this>.config`` at a script's top: the settings object under that path
__path__: list = []
_sys.modules[__name__ + ".config"] = config


disallow_in_graph = allow_in_graph   # (`fn` itself: a capture traces through whatever it calls)


def mark_dynamic(t, index, *, min: Optional[int] = None, max: Optional[int] = None) -> None:  # noqa: A002
    """A hint only (see the module docstring): returns None and changes nothing."""
    return None


mark_static = maybe_mark_dynamic = mark_dynamic


def mark_static_address(t, guard: bool = True) -> None:
    """A hint for CUDA graphs, which tracejit does not make: nothing to do."""


def graph_break() -> None:
    """Nothing to split: a capture keeps going as one graph, with the same values."""


@dataclasses.dataclass
class BreakReason:
    """Why (part of) a call was not captured; `user_stack`: the lines that caused it."""
    reason: str
    user_stack: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ExplainOutput:
    """What ``explain(fn)(*args)`` found: torch._dynamo's fields. A capture here is one
    whole graph or none: a call that cannot be captured runs eagerly, so ``graph_count``
    is 0 and its reason is the one break."""
    graphs: list
    graph_count: int
    graph_break_count: int
    break_reasons: list
    op_count: int
    ops_per_graph: Optional[list] = None
    out_guards: Optional[list] = None
    compile_times: Optional[str] = None

    def __str__(self) -> str:
        lines = [f"Graph Count: {self.graph_count}", f"Graph Break Count: {self.graph_break_count}",
                 f"Op Count: {self.op_count}", "Break Reasons:"]
        for k, b in enumerate(self.break_reasons):
            lines += [f"  Break Reason {k + 1}:", f"    Reason: {b.reason}", "    User Stack:"]
            lines += [f"      {frame}" for frame in b.user_stack]
        lines.append("Ops per Graph:")
        for k, ops in enumerate(self.ops_per_graph or ()):
            lines += [f"  Ops {k + 1}:"] + [f"    {op}" for op in ops]
        lines.append("Out Guards:")
        for k, g in enumerate(self.out_guards or ()):
            lines += [f"  Guard {k + 1}:", f"    {g}"]
        return "\n".join(lines) + "\n"


def explain(f: Callable, *extra_args, **extra_kwargs):
    """``explain(f)(*args, **kwargs)``: compile `f` afresh (a compiled function or module:
    what it wraps), call it, and return an `ExplainOutput` of the graphs that call
    captured and why it could not be. ``explain(f, *args)`` (deprecated in torch) calls now."""
    from .jit import compile as _compile
    from .jit.function import compiled_function_of

    def inner(*args, **kwargs) -> ExplainOutput:
        cf = compiled_function_of(f)
        target = f if cf is None else (cf._bound_self if cf._bound_self is not None else cf._fn)
        compiled = _compile(target)
        fresh = compiled_function_of(compiled)
        if fresh is None:
            raise TypeError(f"explain: expected a function or an nn.Module, got {type(f).__name__}")
        fresh._quiet_break = True   # (the reason is the output, not a warning)
        compiled(*args, **kwargs)
        stats = fresh.cache_stats()
        graphs = [e.graph for e in fresh.entries]
        reasons = [BreakReason(stats["fallback_reason"])] if "fallback_reason" in stats else []
        ops = [[e.prim.name for e in g.eqns] for g in graphs]
        guards = [d.text() for e in fresh.entries for d in e.descs]
        return ExplainOutput(graphs, len(graphs), len(reasons), reasons, sum(map(len, ops)), ops, guards)

    if extra_args or extra_kwargs:
        import warnings
        warnings.warn("explain(f, *args, **kwargs) is deprecated, use explain(f)(*args, **kwargs) instead.",
                      FutureWarning, stacklevel=2)
        return inner(*extra_args, **extra_kwargs)
    return inner


def optimize(backend: Any = "inductor", *, nopython: bool = False, dynamic: Optional[bool] = None, **_: Any):
    """The legacy decorator factory: ``torch._dynamo.optimize("inductor")(fn)``."""
    from .jit import compile as _compile
    return lambda fn: _compile(fn, backend=backend if isinstance(backend, str) else None,
                               fullgraph=nopython, dynamic=dynamic)
