"""The compiler back half: IR autodiff, fusion, loop-nest lowering (loopnest.py) and its CPU and CUDA
renderers, backends (the device object), plans, executors, the disk kernel cache."""
from __future__ import annotations

__all__ = ["compile_graph", "wait"]


def compile_graph(graph, grad_mode: bool = True, name: str = "graph"):
    """An executor ``run(inputs) -> outputs`` for `graph` (Tensors in, Tensors out)."""
    from .executor import CompiledProgram
    return CompiledProgram(graph, name=name)


def wait(fn=None, timeout=None) -> bool:
    """Block until pending background compiles (of `fn`, or all) finish and their entries
    run compiled kernels; False if `timeout` seconds passed first (see compiler/tiers.py)."""
    from .tiers import wait as _wait
    return _wait(fn, timeout)
