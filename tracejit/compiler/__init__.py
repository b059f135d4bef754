"""The numba backend: fusion, loop-nest lowering (loopnest.py) and its CPU and CUDA renderers,
backends (the device object), plans, executors, the disk kernel cache, tiered compiles.

It works on the IR of `tracejit.jit` (graphs already optimized and, for training,
differentiated by jit/autodiff.py) and serves the front end through the interface of
jit/backend.py: importing this package registers `NumbaCompiler` as ``compiler="numba"``.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..jit import backend as _backend
from ..jit.config import set_stance
from . import forkguard as _forkguard  # noqa: F401  (first: see its docstring)

__all__ = ["compile_graph", "wait", "reset", "cache_info", "cache_clear", "cache_prune", "NumbaCompiler",
           "disable", "is_compiling", "is_dynamo_compiling", "allow_in_graph", "cudagraph_mark_step_begin",
           "set_stance", "is_exporting", "list_backends", "compile", "assume_constant_result"]


def compile_graph(graph, grad_mode: bool = True, name: str = "graph"):
    """An executor ``run(inputs) -> outputs`` for `graph` (Tensors in, Tensors out)."""
    from .executor import CompiledProgram
    return CompiledProgram(graph, name=name)


def wait(fn=None, timeout=None) -> bool:
    """Block until pending background compiles (of `fn`, or all) finish and their entries
    run compiled kernels; False on `timeout`, or when an entry stays on tier 0 after a failure.
    Without `fn` the eager ops' kernels asked for so far load too: an op's kernel waits for
    a call a second after its first before it starts, which a short loop never makes."""
    import time
    from .tiers import wait as _wait
    deadline = None if timeout is None else time.monotonic() + timeout
    done = _wait(fn, timeout)
    if fn is not None:
        return done
    from .cpu.kernels import vectorized
    left = 86400.0 if deadline is None else max(0.0, deadline - time.monotonic())
    return vectorized.settle(left) and done


def reset() -> None:
    """Forget the entries of every compiled function and module (``torch.compiler.reset``):
    each captures again at its next call, with no dim learned dynamic. Kernels stay loaded
    and on disk."""
    from ..jit.capture import _LEARNED
    from ..jit.function import all_compiled
    _LEARNED.clear()
    for cf in all_compiled():
        cf.reset()


def disable(fn: Optional[Callable] = None, recursive: bool = True):
    """``torch.compiler.disable``: `fn` unchanged (as a decorator too). Called outside a
    compiled function it runs eagerly; inside one it is captured like the rest, and a
    part that cannot be captured makes the function run eagerly (``fullgraph=False``)."""
    return (lambda f: f) if fn is None else fn


def is_compiling() -> bool:
    """True while tracejit captures a function (its code runs on tracers, once)."""
    from ..ops.registry import trace_state
    return trace_state.tracer is not None


is_dynamo_compiling = is_compiling


def allow_in_graph(fn: Callable) -> Callable:
    return fn


assume_constant_result = allow_in_graph


def is_exporting() -> bool:
    """False: nothing here runs under ``torch.export``."""
    return False


def list_backends(exclude_tags=("debug", "experimental")) -> list:
    """The backend names ``tracejit.compile`` takes, less the debugging ones (as torch's)."""
    from ..jit.compile_api import BACKENDS
    debug = {"eager", "aot_eager", "interpret"} if exclude_tags and "debug" in exclude_tags else set()
    return sorted(({n for n in BACKENDS if n is not None} | set(_backend._registered)) - debug)


def compile(*args, **kwargs):
    """``torch.compiler.compile``: `tracejit.compile`."""
    from ..jit import compile as _compile
    return _compile(*args, **kwargs)


def cudagraph_mark_step_begin() -> None:
    """No CUDA graphs here (see tracejit.compile's modes): nothing to mark."""


def cache_info() -> dict:
    """The disk kernel cache: root, entries, bytes, versions (``python -m tracejit cache info``)."""
    from .cachetool import info
    return info()


def cache_clear() -> int:
    """Remove every entry of the disk kernel cache; returns how many."""
    from .cachetool import clear
    return clear()


def cache_prune(max_mb: Optional[float] = None) -> dict:
    """Remove entries of other versions, then the least recently used until the cache fits
    `max_mb` (default ``TRACEJIT_CACHE_MAX_MB``)."""
    from .cachetool import prune
    return prune(max_mb)


class NumbaCompiler(_backend.Compiler):
    """Entries compiled to numba kernels: in the background (tier 0 first) or at once."""

    name = "numba"

    def executor(self, graph, *, grad_mode: bool, name: str, compile_mode: Optional[str],
                 lock: Any, owner: Any, check: Callable[[], None]) -> _backend.Executor:
        from . import tiers
        from .prepare import background_possible, compile_mode as mode_of, graph_on_cpu
        if mode_of(compile_mode) == "background" and graph_on_cpu(graph):
            from .cacheroot import root  # (not diskcache: its imports are the thread's)
            if root() is not None:
                # The program is built by the background thread (or by whatever reads it
                # first, as `explain` does), from a verified graph: tier 0 runs before `check`.
                def make_program():
                    check()
                    return compile_graph(graph, grad_mode=grad_mode, name=name)
                return tiers.TieredExecutor(graph, None, grad_mode, lock, owner, name,
                                            make_program=make_program)
        check()
        program = compile_graph(graph, grad_mode=grad_mode, name=name)
        if mode_of(compile_mode) == "background" and background_possible(program):
            return tiers.TieredExecutor(graph, program, grad_mode, lock, owner, name)
        return program

    def kernel_error(self, exc: BaseException):
        from .kernel_errors import kernel_error
        return kernel_error(exc)

    def forget(self, owner) -> None:
        from .tiers import forget_failures
        forget_failures(owner)


_backend.register(NumbaCompiler())
