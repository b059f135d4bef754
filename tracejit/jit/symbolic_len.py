"""``len()`` of a tensor being traced: its symbolic first dim, as ``x.shape[0]``.

CPython's ``len()`` turns what ``__len__`` returns into a plain int (through ``__index__``),
so ``len(x)`` of a tracer whose dim 0 is symbolic would ask for the size's value: the dim
kept static, one capture per size (``x.split(len(x) // 2)``, ``x[:len(x) - 1]``). While
some capture runs, `symbolic_len` puts a wrapper in ``builtins.len`` (as side_effects.py
wraps ``print``) that gives the user's code, on the thread that is capturing, the
symbolic size ``x.shape[0]`` for a tracer of that capture, and in every other case calls
the real ``len``: same value, same exceptions (``len(5)``'s TypeError), so other threads
and modules imported meanwhile (numba's) see no difference. The swap is process-wide:
captures running at once, on any thread, are counted, and the last one to end puts the
real ``len`` back, also when it raises.
"""
from __future__ import annotations

import builtins
import contextlib
import functools
import sys
import threading
from typing import Iterator

from ..errors import _OURS
from ..ops.eager import trace_state
from ..shapes import Sym
from ..tensor import Tensor
from .tracer import Tracer

__all__ = ["symbolic_len"]

_real_len = builtins.len
_lock = threading.Lock()
_users = [0]   # captures running now (all threads): the wrapper is in place while > 0


@functools.wraps(_real_len)
def _len(*args, **kwargs):
    # (``*args``: a call of another arity or with keywords meets the real one's TypeError)
    obj = args[0] if args else None
    if isinstance(obj, Tracer) and not kwargs and _real_len(args) == 1:
        ctx = trace_state.tracer
        shape = obj.shape
        if (ctx is not None and shape and isinstance(shape[0], Sym)
                and type(obj).__len__ is Tensor.__len__ and obj._trace._root() is ctx._root()
                and not sys._getframe(1).f_code.co_filename.startswith(_OURS)):
            return shape[0]
    return _real_len(*args, **kwargs)


_len._tracejit_wrapper = True


@contextlib.contextmanager
def symbolic_len() -> Iterator[None]:
    """Within: ``len()`` of a tracer of this thread's capture, called from user code, is its
    first dim as ``x.shape[0]`` gives it (a `Sym` where that dim is symbolic)."""
    with _lock:
        _users[0] += 1
        if _users[0] == 1 and builtins.len is _real_len:   # (not over another patch)
            builtins.len = _len
    try:
        yield
    finally:
        with _lock:
            _users[0] -= 1
            if _users[0] == 0 and builtins.len is _len:
                builtins.len = _real_len
