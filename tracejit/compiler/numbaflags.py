"""numba compile flags that hold while tracejit's own kernel modules compile.

Why: numba gives every function a C-ABI "cfunc" wrapper besides its CPython wrapper, used
only where a function is a first-class value or by ``cfunc``. Nothing of tracejit's takes
it, yet each is lowered, optimised and emitted for the kernel and every helper, and linked
in again: left out, the MLP step's worker jobs went from 5.4-5.6 to 5.0-5.1 s of CPU.

How: `lean` sets ``no_cfunc_wrapper`` for every function numba's dispatcher compiles in
the calling thread inside the block (`_FunctionCompiler._customize_flags`); ``cfunc``
compiles keep theirs. The functions' native code, and so their results, do not change.
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
