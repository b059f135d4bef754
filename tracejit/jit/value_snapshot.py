"""Snapshots of the Python values a capture may have baked into its graph, for guards.

Tracing runs the function's Python once: a number read from a config object
(``args.scale``), a list (``K[0]``), a dict (``self.cfg["s"]``) or a tensor held in one
becomes a constant of the graph. `snapshot` copies what such a value holds now (numbers and
strings by value, tensors, functions and other objects by identity, containers, plain
objects' attributes and an optimizer's ``param_groups`` recursively) and `differs` walks the live value against the copy on a
later call, stopping at the first difference. A value too large to copy (more than
`BUDGET` leaves in one guard: each call walks the copy) is compared by identity only.
"""
from __future__ import annotations

import types
from typing import Any, Optional

import numpy as np

__all__ = ["snapshot", "differs", "worth_watching", "watcher", "type_watcher", "unchanged", "BUDGET", "SCALARS",
           "from_library", "entry_key", "changed_numbers", "plain_object", "guarded_attrs"]

BUDGET = 64
SCALARS = (bool, int, float, complex, str, bytes, type(None))
# Modules whose objects and functions are not the user's: compared by identity, not walked.
LIBRARIES = ("tracejit", "numpy", "numba", "builtins", "math", "functools", "typing", "collections",
             "threading", "logging", "_io", "io")
_OPAQUE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
           type, types.CodeType, types.GeneratorType)


def plain_object(v, library: bool = False) -> bool:
    """A user object whose attributes a forward may read as constants (a config, an
    argparse Namespace): not a module, tensor, class or function, nor (unless `library`)
    a library's object. With `library`, still neither a callable (a functools.partial) nor
    an object of a builtins or types class (an exception, a SimpleNamespace)."""
    from ..nn.module import Module
    from ..tensor import Tensor
    t = type(v)   # (asked of the type: some objects raise on any attribute read, control.Unbound)
    if getattr(t, "__dictoffset__", 0) == 0 or isinstance(v, (Module, Tensor, _OPAQUE)):
        return False
    if library:
        return not callable(v) and t.__module__ not in ("builtins", "types")
    return not from_library(t.__module__)


def from_library(module: Optional[str]) -> bool:
    """Whether a module name (a class's or function's ``__module__``) is one of `LIBRARIES`."""
    return (module or "").split(".", 1)[0] in LIBRARIES


def guarded_attrs(v) -> tuple:
    """The attributes of a library object a capture may read as constants (its class's
    ``_guarded_attrs``: an optimizer's ``param_groups``, whose learning rate a compiled
    function may read), walked like a plain object's; () for other objects."""
    return getattr(type(v), "_guarded_attrs", ())


def worth_watching(v) -> bool:
    """Whether `v` can hold values a capture turns into constants (else skip it)."""
    return type(v) in (list, tuple, dict, set, frozenset) or plain_object(v) or bool(guarded_attrs(v))


def snapshot(v, budget: Optional[list] = None, lifted=frozenset()):
    """A copy of what `v` holds, to compare with `differs`; `budget` is a one-element list
    shared by the snapshots of one guard. A number entry whose key (`entry_key`) is in
    `lifted` is a runtime input (lifted.py): any number of its type matches it."""
    if budget is None:
        budget = [BUDGET]
    budget[0] -= 1
    if isinstance(v, SCALARS):
        return ("s", type(v), v)
    t = type(v)
    if budget[0] <= 0 or (t in (list, tuple, dict, set, frozenset) and len(v) > budget[0]):
        return ("i", v)   # (too large to compare on every call: by identity)

    def entry(key, x):
        if lifted and type(x) in (int, float) and entry_key(v, key) in lifted:
            return ("t", type(x))
        return snapshot(x, budget, lifted)
    if t in (list, tuple):
        return ("l", v, t, [entry(i, x) for i, x in enumerate(v)])
    if t is dict:
        return ("d", v, [(k, entry(k, x)) for k, x in v.items()])
    if t in (set, frozenset):
        return ("f", v, t, frozenset(x for x in v if isinstance(x, SCALARS)), len(v))
    if plain_object(v):
        return ("o", v, t, [(k, entry(k, x)) for k, x in vars(v).items()])
    names = guarded_attrs(v)
    if names:
        return ("a", v, t, [(k, snapshot(getattr(v, k), budget, lifted)) for k in names])
    return ("i", v)


def entry_key(owner, key) -> Optional[tuple]:
    """The lifted.py key of entry `key` of a list or dict, or of attribute `key` of a plain
    object: a float there can be swapped for a runtime input (a tuple's cannot: None)."""
    t = type(owner)
    if t is list or t is dict:
        return ("item", id(owner), key)
    return ("attr", id(owner), key) if plain_object(owner) else None


def changed_numbers(snap, v) -> set:
    """The `entry_key`s of the number entries of `v` that hold another number of their type
    than `snap` copied (a learning rate a schedule sets): runtime inputs for the next capture."""
    kind, out = snap[0], set()
    if kind not in ("l", "d", "o", "a") or (kind != "d" and type(v) is not snap[2]):
        return out
    if kind == "l":
        pairs = zip(range(len(v)), snap[3], v) if len(v) == len(snap[3]) else ()
    elif kind == "d":
        if type(v) is not dict:
            return out
        pairs = ((k, s, v[k]) for k, s in snap[2] if k in v)
    elif kind == "o":
        now = vars(v)
        pairs = ((k, s, now[k]) for k, s in snap[3] if k in now)
    else:
        for k, s in snap[3]:
            out |= changed_numbers(s, getattr(v, k, None))
        return out
    for k, s, x in pairs:
        if s[0] == "s" and s[1] in (int, float) and type(x) is s[1] and x != s[2] and s[2] == s[2]:
            key = entry_key(v, k)
            if key is not None:
                out.add(key)
        else:
            out |= changed_numbers(s, x)
    return out


def differs(snap, v) -> Optional[str]:
    """None when `v` holds what `snap` copied, else where it first differs."""
    kind = snap[0]
    if kind == "t":   # any value of one type (`type_watcher`)
        return None if type(v) is snap[1] else f"any {snap[1].__name__} -> {v!r}"
    if kind == "s":
        _, t, old = snap
        same = type(v) is t and (old == v or t is float and old != old and v != v)
        return None if same else f"{old!r} -> {v!r}"
    if kind == "i":
        return None if v is snap[1] else "another object"
    if kind == "l":
        _, _, t, items = snap
        if type(v) is not t or len(v) != len(items):
            return f"length or type changed (now {type(v).__name__} of {_len(v)})"
        for i, (s, x) in enumerate(zip(items, v)):
            d = differs(s, x)
            if d is not None:
                return f"[{i}]: {d}"
        return None
    if kind == "d":
        items = snap[2]
        if type(v) is not dict or len(v) != len(items):
            return f"keys changed (now {_len(v)})"
        return _items_differ(items, v, "[{!r}]")
    if kind == "f":
        _, _, t, plain, n = snap
        if type(v) is not t or len(v) != n or not plain <= v:
            return "contents changed"
        return None
    _, _, t, items = snap   # "o", "a"
    if type(v) is not t:
        return f"type changed to {type(v).__name__}"
    if kind == "a":
        return _items_differ(items, {k: getattr(v, k) for k, _ in items if hasattr(v, k)}, ".{}")
    d_ = vars(v)
    if len(d_) != len(items):
        return "attributes added or removed"
    return _items_differ(items, d_, ".{}")


def _items_differ(items: list, now: dict, key: str) -> Optional[str]:
    """Where the entries of `now` first differ from the snapshots in `items` (None: nowhere)."""
    for k, s in items:
        if k not in now:
            return f"{key.format(k)} removed"
        d = differs(s, now[k])
        if d is not None:
            return f"{key.format(k)}: {d}"
    return None


def _len(v: Any) -> str:
    try:
        return str(len(v))
    except TypeError:
        return "?"


def _scalar_copy(v, t, depth: int = 4):
    """A copy of a container (nested lists, tuples, dicts) or plain object whose values
    are all numbers and strings, compared on each call with one C-level ``==``; else None."""
    if t in (list, tuple, dict):
        items = v.values() if t is dict else v
        out = []
        for x in items:
            tx = type(x)
            if tx in SCALARS:
                out.append(x)
            elif depth and tx in (list, tuple, dict):
                c = _scalar_copy(x, tx, depth - 1)
                if c is None:
                    return None
                out.append(c)
            else:
                return None
        return dict(zip(v.keys(), out)) if t is dict else t(out)
    if plain_object(v):
        d = vars(v)
        return dict(d) if all(type(x) in SCALARS for x in d.values()) else None
    return None


def watcher(v, budget: Optional[list] = None, lifted=frozenset()) -> tuple:
    """What `unchanged` compares a later value with: (kind, a, snapshot). Kinds: 0 the same
    object, 1 an equal number or string of the same type, 2 a container or 3 a plain object
    holding equal numbers and strings, 4 the full walk (`differs`; also where `lifted`
    names runtime-input floats, which any float matches)."""
    snap = snapshot(v, budget, lifted)
    kind = snap[0]
    if kind == "i":
        return (0, v, snap)
    if kind == "s":
        return (1, v, snap)
    t = type(v)
    copy = None if lifted and _holds_input(snap) else _scalar_copy(v, t)
    if copy is not None:
        return (2 if t in (list, tuple, dict) else 3, copy, snap)
    return (4, None, snap)


def _holds_input(snap) -> bool:
    """Whether a snapshot holds a runtime-input float (matched by type, not by value)."""
    kind = snap[0]
    if kind == "t":
        return True
    if kind == "l":
        return any(_holds_input(x) for x in snap[3])
    if kind in ("d", "o", "a"):
        return any(_holds_input(x) for _, x in snap[-1])
    return False


def type_watcher(t: type) -> tuple:
    """A watcher that takes any value of type `t` as unchanged (a runtime input: lifted.py)."""
    return (5, t, ("t", t))


def unchanged(w: tuple, v) -> bool:
    """Whether `v` holds what `watcher` saw (the common cases without a walk)."""
    kind, a, snap = w
    if kind == 0:
        return v is a
    if kind == 5:
        return type(v) is a
    if kind == 1:
        return type(v) is snap[1] and (v == a or (v != v and a != a))
    if kind == 2:
        if type(v) is type(a) and v == a:
            return True
    elif kind == 3:
        if type(v) is snap[2] and vars(v) == a:
            return True
    return differs(snap, v) is None

class TensorValueReads:
    """The values of concrete tensors (a global, a buffer) that Python read during a capture
    (``scale.item()``, ``float(self.t)``, ``if flag:``) and the graph keeps as constants:
    a call after one of them changed in place (``scale.fill_(3.0)``) must capture again,
    as eagerly it would read the new value. Each is read again per call: one element as a
    number, a small tensor (jit/constfold.py) as an array compared whole."""

    def __init__(self, reads: list):
        self.reads = reads      # [(tensor, value read, "file:line")]

    def _now(self, t):
        return t._values().reshape(()).item()

    def _same(self, t, v) -> bool:
        from .scalars import same_number
        if isinstance(v, np.ndarray):
            now = t._values()
            return now.shape == v.shape and bool(np.array_equal(now, v,
                                                                equal_nan=v.dtype.kind in "fc"))
        now = self._now(t)
        return now is v or same_number(now, v)

    def __call__(self) -> bool:
        return all(self._same(t, v) for t, v, _ in self.reads)

    def text(self) -> str:
        return "; ".join(f"the tensor read at {w} holds {v!r}" for _, v, w in self.reads)

    def describe(self) -> list:
        return [f"the value of the tensor read as a Python number at {w} changed: {v!r} -> {self._now(t)!r}"
                if not isinstance(v, np.ndarray) else
                f"the value of the tensor read by Python at {w} changed: {v.tolist()} -> {t._values().tolist()}"
                for t, v, w in self.reads if not self._same(t, v)]


def with_tensor_reads(check, ctx):
    """`check` (an entry's extra guard, or None), also checking the reads of the capture
    `ctx` (`TensorValueReads`). A tensor read through a computed value (``if self.step <
    1000:``) that the function then writes would fail its guard on every next call: the
    function cannot be one graph. (A tensor read itself, ``int(self.ptr)``, may cycle
    through a few values, each an entry.)"""
    reads, writes = ctx.value_reads, ctx.buffer_writes
    written = [w for t, _, w in reads if id(t) in ctx.folded_reads and (
        id(t) in writes or (t._data_of is not None and id(t._data_of) in writes))]
    if written:
        from ..errors import TraceError
        raise TraceError(f"the tensor read by Python at {written[0]} is written by this function")
    if not reads:
        return check
    mine = TensorValueReads(reads)
    if check is None:
        return mine
    from .module_guard import _AllChecks
    return _AllChecks([check, mine])
