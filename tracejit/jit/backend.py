"""The boundary between the front end (jit/) and the backends (compiler/).

What an entry runs is an `Executor`: ``executor(inputs) -> outputs`` plus the few
questions the front end asks of it (its tier and a line for explain, kernels still
compiling, explain's sections, per-equation values for check mode, compiling ahead of
a call, the array function of the inference hot path). What ``compiler="numba"`` names is
a `Compiler`: it turns an optimized graph into an executor, and names the kernel behind an
exception. (Per-device code generation inside compiler/ is that package's business.)

The dependency runs one way. compiler/ imports jit/ (the IR, the passes, autodiff, the
interpreter) and subclasses these two classes; jit/ reaches a backend only through them.
`get` is the one place in jit/ that imports compiler/: it imports a built-in backend's
package on first use, and that package registers itself with `register` (another
backend can register under its own name). tests/jit/test_boundary.py checks it.

`Interpreted` is the executor of ``compiler="interpret"`` (and of every entry when no
backend can be loaded): the IR interpreter over the ops' eager implementations.
"""
from __future__ import annotations

import abc
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..errors import raise_at_user_line
from .interpreter import interpret

if TYPE_CHECKING:  # annotations only
    from .ir import Graph

__all__ = ["Executor", "Interpreted", "Compiler", "InputKeeper", "register", "get", "executor_for",
           "raise_kernel_error"]


class Executor(abc.ABC):
    """What a compiled entry runs. Subclasses implement ``__call__`` and `tier`; the other
    questions have answers that fit an executor without kernels."""

    @abc.abstractmethod
    def __call__(self, ins: list) -> list:
        """Run on the entry's inputs (Tensors, and Python numbers for runtime scalars) and
        return the graph's outputs as Tensors, recording autograd as the graph requires."""

    @property
    @abc.abstractmethod
    def tier(self) -> str:
        """``"interpret"`` (the IR interpreter for good), ``"tier0"`` (the interpreter while
        kernels compile) or ``"compiled"``."""

    def describe(self) -> str:
        """One line for explain: which tier the entry runs on and what is pending."""
        return {"interpret": "the IR interpreter (compiler='interpret')", "tier0": "tier 0 (the IR interpreter)",
                "compiled": "compiled kernels (sync mode)"}[self.tier]

    def pending_kernels(self) -> int:
        """Kernels still compiling in the background."""
        return 0

    def kernel_counts(self) -> Optional[tuple]:
        """(in, all) kernels of a background compile (``all - in`` are `pending_kernels`),
        None while it has not planned yet (their number is unknown); (0, 0) without one."""
        return (0, 0)

    def explain_sections(self) -> list:
        """Extra [(title, text)] sections for explain (fusion groups, plans, kernels)."""
        return []

    def debug_values(self, ins: list) -> Optional[dict]:
        """{graph Var: array} of every value this executor computes for `ins` (check mode
        compares them with the interpreter's), or None when it cannot tell."""
        return None

    def precompile(self, ins: list, grad_mode: bool) -> None:
        """Compile (or load) every kernel a call with `ins` uses, now."""

    def fast_inference(self) -> Optional[tuple]:
        """``(fn, dtype, device)`` when an inference call can skip `__call__`: ``fn(*arrays)``
        takes the input arrays (no runtime scalars) and returns a list holding the one
        output's array, a new array that only needs wrapping as a Tensor of that dtype
        and device. None otherwise."""
        return None

    def fast_training(self, diff_idx: tuple) -> Optional[list]:
        """``[fn]`` when a training call (gradients for the inputs at `diff_idx`) can skip
        `__call__`: `L` holds the graph's input tensors in order and ``fn(L)`` returns the
        one output tensor, as ``self(L)[0]`` would. The caller calls ``cell[0]``, which
        the executor may replace (its first call builds the real one). None otherwise."""
        return None

    def attach(self, entry: Any) -> None:
        """Called once the entry that runs this executor exists. An executor that is
        replaced later (tier 0 -> compiled) calls ``entry.set_executor(new)`` then."""


class Interpreted(Executor):
    """The IR interpreter as an entry's executor (``compiler="interpret"``)."""

    def __init__(self, graph: "Graph"):
        self.graph = graph

    def __call__(self, ins: list) -> list:
        return interpret(self.graph, ins)

    @property
    def tier(self) -> str:
        return "interpret"


class InputKeeper(abc.ABC):
    """A grad_fn whose backward reads its inputs' values (a compiled call's node): before
    the call's own in-place update overwrites input `t`, `keep_input` keeps a copy."""

    @abc.abstractmethod
    def keep_input(self, t) -> None: ...


class Compiler(abc.ABC):
    """Turns optimized graphs into executors; registered under `name`, the value of the
    ``compiler=`` option of trace/script."""

    name: str = ""

    @abc.abstractmethod
    def executor(self, graph: "Graph", *, grad_mode: bool, name: str, compile_mode: Optional[str],
                 lock: Any, owner: Any, check: Callable[[], None]) -> Executor:
        """The executor of one entry. `compile_mode` is the function's ``compile=`` option;
        `lock` is the function's lock (a background compile switches the entry under it);
        `owner` is the CompiledFunction (``wait(fn)`` finds its pending compiles).

        `check()` verifies the captured graph and `graph` (`ir.verify`; raises VerifyError):
        call it before anything is built or compiled from `graph`. An executor that first
        runs the interpreter (which binds each op's eager implementation, with that op's
        own checks) may call it later, before it builds its program: a first call then
        does not pay for it (the CNN's capture: 0.6 ms of its ~5.6)."""

    def kernel_error(self, exc: BaseException) -> Optional[Exception]:
        """An error naming the kernel and the user's lines behind `exc`, raised inside one of
        this backend's kernels; None when `exc` did not come from one."""
        return None

    def forget(self, owner: Any) -> None:
        """Drop what this backend keeps about `owner`'s entries (their failed compiles):
        the CompiledFunction is being reset."""


_registered: dict = {}
_lock = threading.Lock()


def forget(owner: Any) -> None:
    """Every registered backend's `Compiler.forget` of `owner`."""
    with _lock:
        backends = list(_registered.values())
    for b in backends:
        b.forget(owner)


def register(backend: Compiler) -> None:
    """Make `backend` available as ``compiler=backend.name``."""
    if not isinstance(backend, Compiler):
        raise TypeError(f"register expects a tracejit.jit.backend.Compiler, got {type(backend).__name__}")
    with _lock:
        _registered[backend.name] = backend


def get(name: Optional[str]) -> Optional[Compiler]:
    """The backend called `name`, or None for ``None``/``"interpret"`` and when it cannot
    be loaded (numba missing): entries then run on the interpreter."""
    if name is None or name == "interpret":
        return None
    b = _registered.get(name)
    if b is None and name == "numba":
        try:
            from .. import compiler  # noqa: F401  (the one import of compiler/: it registers itself)
        except ImportError:
            return None
        b = _registered.get(name)
    return b


def raise_kernel_error(exc: BaseException) -> None:
    """Raise the error a loaded backend gives for `exc` (from `exc`), if any, or `exc` from
    the user's line (`raise_at_user_line`); otherwise return, and the caller re-raises `exc`
    (``except Exception as exc: raise_kernel_error(exc); raise``)."""
    for b in list(_registered.values()):
        err = b.kernel_error(exc)
        if err is not None:
            raise_at_user_line(err)
            raise err from exc
    raise_at_user_line(exc)


def executor_for(backend_name: Optional[str], graph: "Graph", *,
                 check: Optional[Callable[[], None]] = None, **kw: Any) -> Executor:
    """The executor of an entry: the backend's, or the interpreter's without one. `check`
    verifies the graph (see `Compiler.executor`); the interpreter's executor runs it here."""
    check = check if check is not None else (lambda: None)
    b = get(backend_name)
    if b is None:
        check()
        return Interpreted(graph)
    ex = b.executor(graph, check=check, **kw)
    if not isinstance(ex, Executor):
        raise TypeError(f"backend {b.name!r} returned {type(ex).__name__}, not an Executor")
    return ex
