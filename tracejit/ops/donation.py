"""Operand arrays an op may overwrite with its result (donated).

A primitive whose result is its first operand updated (``index_add``: the target with
rows added) computes out of place: it copies the target, then writes the copy. Where the
caller knows the target's array is its own to overwrite, it donates it for one call
(`donating`), and the primitive takes `target(a)`: `a` itself, else a copy. The callers:

- ``x.index_add_(...)``, ``x[i] = v`` and ``x.index_put_(...)`` eagerly, whose result goes
  into ``x``'s memory anyway (the copy in the op and the copy back made two passes over ``x``);
- a gather's gradient, adding rows into zeros it has just made (an embedding's table);
- a compiled plan, for a value that dies at the op and that nothing else holds
  (compiler/plan.py ``_donated``).

Primitives taking `target` mark it with ``extra["donates"]``. Every implementation of
such a primitive (its numpy form, a backend's kernel) gets its target from `target`.
"""
from __future__ import annotations

import threading
from typing import Callable

__all__ = ["target", "donated", "donating"]


class _Donated(threading.local):
    array = None   # the array the running call may write (set by `donating`)


_state = _Donated()


def target(a):
    """The array to write the result into: `a` where it is donated, else a copy of it."""
    return a if a is _state.array else a.copy()


def donated(a) -> bool:
    """Whether `a` is donated: a kernel writing a whole new result may write it there."""
    return a is _state.array


def donating(a, fn: Callable, *args, **params):
    """``fn(*args, **params)`` with `a` donated (None: nothing is)."""
    prev = _state.array
    _state.array = a
    try:
        return fn(*args, **params)
    finally:
        _state.array = prev
