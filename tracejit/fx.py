"""``torch.fx`` names public code touches. tracejit builds no FX graphs: `symbolic_trace`
and `Tracer.trace` raise NotImplementedError saying what to use instead
(``tracejit.compile`` to trace and compile a model, ``tracejit.explain`` to see its
graph); `wrap` is the identity, and the graph classes exist for ``isinstance`` checks."""
from __future__ import annotations

from typing import Any

__all__ = ["Graph", "GraphModule", "Node", "Proxy", "Tracer", "symbolic_trace", "wrap"]

_USE = ("tracejit has no torch.fx graphs: use tracejit.compile(model) to trace and compile a model, "
        "tracejit.explain(fn, *args) to see the graph it captures")


def symbolic_trace(root: Any, concrete_args=None) -> "GraphModule":
    raise NotImplementedError(f"torch.fx.symbolic_trace: {_USE}")


def wrap(fn_or_name):
    """``torch.fx.wrap``: marks a function as a leaf for FX tracing; nothing to mark here."""
    return fn_or_name


class _NoGraph:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"torch.fx.{type(self).__name__}: {_USE}")


class Graph(_NoGraph):
    pass


class GraphModule(_NoGraph):
    pass


class Node(_NoGraph):
    pass


class Proxy(_NoGraph):
    pass


class Tracer:
    def __init__(self, *args, **kwargs):
        pass

    def trace(self, root: Any, concrete_args=None) -> Graph:
        raise NotImplementedError(f"torch.fx.Tracer.trace: {_USE}")
