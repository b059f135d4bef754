"""The guard of a compiled function on the Python values it reads from globals and closures.

Tracing turns what the function reads from its module's globals and its closure into
constants: a number (``SCALE = 3.0`` ... ``x * SCALE``), a config object's attribute
(``args.scale``), a list or dict entry (``K[0]``), a module's parameters, a function it
calls. A later call is only right for the same values, so each capture keeps a snapshot
(`value_snapshot`) of every name the code refers to, and of the names its own helper
functions refer to (two levels deep), and a call after one changes captures again. A
module named by a global or closure gets the compiled module's state check (a rebound
parameter is put in place without a recapture). Python modules (``np``, ``F``) are not
watched; a function that refers to nothing else has no guard.
"""
from __future__ import annotations

import collections.abc
import contextlib
import dis
import io
import types
from typing import Callable, Optional

from ..errors import TraceError
from .lifted import NUMBERS, ref_key
from .value_snapshot import (BUDGET, changed_numbers, differs, from_library, snapshot, type_watcher,
                             unchanged, watcher)

__all__ = ["python_refs_guard", "forward_refs_guard", "global_names"]

_MISSING = object()


class _Read(set):
    """The module attributes a capture read (module_guard.recording's set), and the
    snapshots of the references taken before it ran."""
    before: Optional[list] = None


class _RefsGuard:
    def __init__(self, refs: list, has_modules: bool):
        self.refs = refs          # (label, globals dict or None, name or cell)
        self.has_modules = has_modules

    @contextlib.contextmanager
    def recording(self, modules: bool = False):
        """Around a capture: what the references hold before it (a value the capture
        itself changes, a list it appends to, is a log rather than a constant: it is
        compared by identity only), and the module attributes it reads."""
        from .module_guard import recording
        read = _Read()
        read.before = [snapshot(_now(gl, key)) for _, gl, key in self.refs]
        for label, gl, key in self.refs:   # (checked before the code runs)
            v = _now(gl, key)   # (a generator, iter(batches); not a log file a capture only writes to)
            if isinstance(v, collections.abc.Iterator) and not isinstance(v, io.IOBase):
                raise TraceError(f"{label} is an iterator ({type(v).__name__}): a capture would keep what it "
                                 f"gave once, for every later call; pass its items in as arguments instead")
        if not (modules or self.has_modules):
            yield read
            return
        with recording() as found:
            yield read
            read |= found

    def snapshot(self, consts=None, writes=(), read=None, lifted=frozenset()) -> "_RefsCheck":
        """The check of a capture; `lifted`: the keys of the numbers it read as runtime
        inputs (lifted.py), checked by type only."""
        return _RefsCheck(self.refs, consts if consts is not None else [], writes, read, lifted)


def _now(gl, key):
    if gl is not None:
        return gl.get(key, _MISSING)
    try:
        return key.cell_contents
    except ValueError:   # an empty cell
        return _MISSING


class _RefsCheck:
    def __init__(self, refs: list, consts: list, writes, read, lifted=frozenset()):
        from ..nn.module import Module
        from .module_guard import _StateCheck
        budget = [BUDGET]
        self.items = []
        self.modules = []
        before = getattr(read, "before", None) or [None] * len(refs)
        for (label, gl, key), was in zip(refs, before):
            v = _now(gl, key)
            changed = was is not None and differs(was, v) is not None
            # (a value the capture itself changed is a log: the same object is enough)
            w = ((0, v, ("i", v)) if changed else type_watcher(type(v)) if ref_key(gl, key) in lifted
                 and type(v) in NUMBERS else watcher(v, budget, lifted))
            self.items.append((gl, key, w, label))
            if isinstance(v, Module):
                self.modules.append((label, _StateCheck(v, consts, writes, read, lifted=lifted)))

    def __call__(self) -> bool:
        for gl, key, w, _ in self.items:
            if not unchanged(w, gl.get(key, _MISSING) if gl is not None else _now(None, key)):
                return False
        for _, check in self.modules:
            if not check():
                return False
        return True

    def changed_numbers(self) -> set:
        """The keys (lifted.py) of the number references that hold another number now, of the
        number entries of the containers and objects they name, and of the number attributes
        of the modules they name."""
        out = set()
        for gl, key, w, _ in self.items:
            v = _now(gl, key)
            if w[0] == 1 and type(w[1]) in NUMBERS and type(v) is type(w[1]) and not unchanged(w, v):
                out.add(ref_key(gl, key))
            elif w[0] in (2, 3, 4):   # (floats inside: a config's, an optimizer's rate)
                out |= changed_numbers(w[2], v)
        for _, check in self.modules:
            out |= check.changed_numbers()
        return out

    def text(self) -> str:
        return "Python values read: " + ", ".join(label for *_, label in self.items)

    def describe(self) -> list:
        out = []
        for gl, key, w, label in self.items:
            d = differs(w[2], _now(gl, key))
            if d is not None:
                out.append(f"{label} changed: {d}")
        for label, check in self.modules:
            if not check():
                out += [f"{label}: {x}" for x in check.describe()]
        return out


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def global_names(code) -> dict:
    """The names `code` loads as globals, in order (``co_names`` also holds attribute names:
    ``self.step`` does not read a global ``step``)."""
    return dict.fromkeys(i.argval for i in dis.get_instructions(code)
                         if i.opname in ("LOAD_GLOBAL", "LOAD_NAME"))


def _user_function(v) -> bool:
    return isinstance(v, types.FunctionType) and not from_library(v.__module__)


def _collect(fn, refs: list, seen: set, depth: int) -> bool:
    """Adds `fn`'s global and closure references to `refs`; True if one is a module."""
    from ..nn.module import Module
    code, gl = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or gl is None:
        return False
    found = []
    for c in _codes(code):
        for n in global_names(c):
            if n in gl and not (n.startswith("__") and n.endswith("__")) and (id(gl), n) not in seen:
                seen.add((id(gl), n))
                found.append((f"global {n!r}", gl, n, gl[n]))
    for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
        if (id(cell), n) not in seen:
            seen.add((id(cell), n))
            found.append((f"closure variable {n!r}", None, cell, _now(None, cell)))
    has_modules = False
    for label, g, key, v in found:
        if isinstance(v, types.ModuleType):
            continue
        refs.append((label, g, key))
        has_modules |= isinstance(v, Module)
        if depth > 0 and _user_function(v):
            has_modules |= _collect(v, refs, seen, depth - 1)
    return has_modules


def python_refs_guard(fn: Callable) -> Optional[_RefsGuard]:
    """The guard for what `fn` reads from its globals and closure, or None when it reads nothing."""
    refs: list = []
    has_modules = _collect(fn, refs, set(), 2)
    return _RefsGuard(refs, has_modules) if refs else None


def forward_refs_guard(root) -> Optional[_RefsGuard]:
    """The same for a compiled module: what the user-written ``forward`` of each of its
    (sub)module classes reads from its globals (library modules' forwards are not watched)."""
    refs: list = []
    seen: set = set()
    has_modules = False
    for cls in {type(m) for m in root.modules()}:
        fwd = getattr(cls, "forward", None)
        if _user_function(fwd):
            has_modules |= _collect(fwd, refs, seen, 2)
    return _RefsGuard(refs, has_modules) if refs else None
