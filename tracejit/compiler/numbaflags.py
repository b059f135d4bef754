"""numba compile flags that hold while tracejit's own kernel modules compile.

Why: numba gives every function it compiles two entry points besides its native one: a
CPython wrapper (calls from Python) and a C-ABI "cfunc" wrapper, used only where a jitted
function is taken as a first-class function value (numba's FunctionType) or by ``cfunc``'s
own compiler. Nothing of tracejit's takes that wrapper: kernels are called from Python
(the CPython wrapper), from other kernels (the native function, linked) or through an
address (`voidptr.call_at`, the native function too). Each wrapper is lowered, optimised by
LLVM and emitted as machine code with its function, for the kernel and for every helper it
calls (element helpers, mathlib's functions, numba's own np.empty/min/max implementations),
and the helpers' copies are linked into the kernel and optimised again. Left out: the MLP
step's worker jobs went from 5.4-5.6 to 5.0-5.1 s of CPU (one process replaying them, load ~5).

How: numba has no per-call switch for its wrappers apart from the ``no_cfunc_wrapper``
target option, which would have to be written into every generated and hand-written
kernel's decorator and every helper's (mathlib's functions are shared with user-visible
code). `lean` sets the flag for every function that numba's dispatcher compiles in the
calling thread inside the block (`_FunctionCompiler._customize_flags`, numba's hook for a
compiler's flags; ``cfunc`` compiles override it and keep their wrapper). The native code
of the functions themselves does not change (the wrapper is a separate function that calls
them), so neither do results.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

__all__ = ["lean"]

_local = threading.local()
_installed = False
_install_lock = threading.Lock()


def _depth() -> int:
    return getattr(_local, "depth", 0)


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        from numba.core import dispatcher
        compiler = getattr(dispatcher, "_FunctionCompiler", None)
        plain = None if compiler is None else compiler.__dict__.get("_customize_flags")
        if plain is None:
            # A numba without this hook: the wrappers stay (compiles cost what they did
            # before), nothing else changes.
            _installed = True
            return

        def _customize_flags(self, flags):
            flags = plain(self, flags)
            if _depth():
                flags.no_cfunc_wrapper = True
            return flags

        compiler._customize_flags = _customize_flags
        _installed = True


@contextlib.contextmanager
def lean() -> Iterator[None]:
    """Within the block, functions numba compiles in this thread get no cfunc wrapper."""
    _install()
    depth = _depth()
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
