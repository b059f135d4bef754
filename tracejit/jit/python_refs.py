"""The guard of a compiled function on the Python numbers and strings it reads from its
module's globals and its closure (``SCALE = 3.0`` ... ``return x * SCALE``): tracing turns
them into constants, so a call after one changes captures again instead of reusing the
graph made for the old value. Only names the function's own code refers to are watched
(a helper it calls reads its globals unguarded); a function that reads none has no guard.
"""
from __future__ import annotations

from typing import Callable, Optional

from .module_guard import _plain, _same

__all__ = ["python_refs_guard"]


class _RefsGuard:
    def __init__(self, fn: Callable, globals_: dict, names: list, cells: list):
        self.fn, self.globals, self.names, self.cells = fn, globals_, names, cells

    def snapshot(self, consts=None, writes=(), read=None) -> "_RefsCheck":
        return _RefsCheck(self)


class _RefsCheck:
    def __init__(self, g: _RefsGuard):
        gl = g.globals
        self.globals = [(n, gl.get(n)) for n in g.names]
        self.cells = [(n, c, _cell(c)) for n, c in g.cells]
        self.g = gl

    def __call__(self) -> bool:
        g = self.g
        for n, v in self.globals:
            if not _same(g.get(n), v):
                return False
        for _, c, v in self.cells:
            if not _same(_cell(c), v):
                return False
        return True

    def text(self) -> str:
        vals = [f"{n} == {v!r}" for n, v in self.globals] + [f"{n} == {v!r}" for n, _, v in self.cells]
        return "Python values read: " + ", ".join(vals)

    def describe(self) -> list:
        out = [f"global {n!r} changed: {v!r} -> {self.g.get(n)!r}" for n, v in self.globals
               if not _same(self.g.get(n), v)]
        out += [f"closure variable {n!r} changed: {v!r} -> {_cell(c)!r}" for n, c, v in self.cells
                if not _same(_cell(c), v)]
        return out


def _cell(c):
    try:
        return c.cell_contents
    except ValueError:   # an empty cell
        return None


def python_refs_guard(fn: Callable) -> Optional[_RefsGuard]:
    """The guard for `fn`'s global and closure numbers/strings, or None when it reads none."""
    code = getattr(fn, "__code__", None)
    globals_ = getattr(fn, "__globals__", None)
    if code is None or globals_ is None:
        return None
    names = [n for n in code.co_names if n in globals_ and _plain(globals_[n])
             and not (n.startswith("__") and n.endswith("__"))]
    cells = [(n, c) for n, c in zip(code.co_freevars, fn.__closure__ or ()) if _plain(_cell(c))]
    return _RefsGuard(fn, globals_, names, cells) if names or cells else None
