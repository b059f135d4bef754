"""The numba backend: IR autodiff, fusion, kernel generation, plans, the disk kernel cache."""
from __future__ import annotations

__all__ = ["compile_graph"]


def compile_graph(graph, grad_mode: bool = True, name: str = "graph"):
    """An executor ``run(inputs) -> outputs`` for `graph` (Tensors in, Tensors out)."""
    from .executor import CompiledProgram
    return CompiledProgram(graph, name=name)
