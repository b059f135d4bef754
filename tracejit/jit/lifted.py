"""Numbers read from Python state that keep changing: runtime inputs of the graph.

A capture turns the Python numbers a function reads from module attributes
(``x * self.temperature``), globals and closure variables into constants, and its guard
compares them by value (module_guard.py, python_refs.py). A float that changes on every
call (a temperature schedule, an annealed coefficient) or an int (a queue pointer, a step)
would then capture once per value. So, as torch.compile's automatic dynamic does, such a
number becomes a runtime input once a call found it changed: the next capture reads it
through a scalar input of the graph, its guard checks only that it is still a number of
its type, and each call passes its current value (`Lifted.value`). An int used as a size
or slice bound (``queue[:, self.ptr:self.ptr + n]``) is a symbolic size there
(size_args.py). Python code that needs the number itself (``if self.t > 1``,
``range(self.n)``) still gets it, guarded like a number argument's (scalars.py).

Keys name where a number lives: ``("attr", id(module or plain object), name)``,
``("global", id(globals), name)``, ``("cell", id(cell))``, ``("item", id(list or dict),
key)`` (an optimizer's ``param_groups[0]["lr"]`` a compiled update reads). `lifting` is
the capture's side: within it, the trace reads the numbers of its keys as inputs; the
module attribute hook (module_guard.py) calls
`lifted_attribute`, globals and closure cells are swapped for the inputs while the
function runs and put back after.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Optional

from .. import dtypes as _dt
from ..ops.registry import Aval

__all__ = ["Lifted", "lifting", "lifted_attribute", "written", "ref_key", "refs_of", "changed_numbers"]

_tls = threading.local()   # .state: the `_State` of the capture running in this thread
NUMBERS = (int, float)     # the types a capture lifts (``type(v) in NUMBERS``: not bool)


class Lifted:
    """One number a capture reads as a runtime input: where it lives, how to read it, and
    its value in the call being captured (`hint`)."""

    __slots__ = ("key", "label", "_obj", "_name", "hint")

    def __init__(self, key: tuple, label: str, obj: Any, name: Optional[str], hint=None):
        self.key, self.label, self._obj, self._name, self.hint = key, label, obj, name, hint

    def value(self) -> Any:
        """Its value now (what a call passes to the graph)."""
        kind = self.key[0]
        if kind == "attr":
            return vars(self._obj).get(self._name)
        if kind == "global":
            return self._obj.get(self._name)
        if kind == "item":
            return self._obj[self._name]
        return self._obj.cell_contents

    def __repr__(self) -> str:
        return self.label


def ref_key(gl, key) -> tuple:
    """The key of a global (`gl` its module's dict) or of a closure cell (`gl` None)."""
    return ("global", id(gl), key) if gl is not None else ("cell", id(key))


class _State:
    def __init__(self, ctx, keys: set):
        self.ctx, self.keys = ctx, keys
        self.made: dict = {}   # key -> tracer

    def input(self, key: tuple, label: str, obj, name, value):
        t = self.made.get(key)
        if t is None:
            ctx = self.ctx
            t = ctx.new_input(Aval((), _dt.scalar_dtype(value), weak=True), "".join(
                c if c.isalnum() else "_" for c in label.split(" ")[-1]).strip("_"))
            ctx.lifted[t._var] = Lifted(key, label, obj, name, value)
            self.made[key] = t
        return t


@contextlib.contextmanager
def lifting(ctx, keys: set, refs: list = ()):
    """Within: the trace `ctx` (a root context) reads the numbers named by `keys` as runtime
    inputs. `refs` are the function's global and closure references (python_refs.py:
    (label, globals dict or None, name or cell)); those among `keys` holding a number, and
    the number entries among `keys` of the lists, dicts and plain objects they reach, are
    swapped for their inputs until the end, then put back."""
    if not keys:
        yield
        return
    state = _State(ctx, keys)
    before = getattr(_tls, "state", None)
    _tls.state = state
    swapped = []
    entries: list = []
    try:
        for label, gl, key in refs:
            k = ref_key(gl, key)
            if k not in keys:
                continue
            if gl is not None:
                v = gl.get(key)
                if type(v) in NUMBERS:
                    t = state.input(k, label, gl, key, v)
                    gl[key] = t
                    swapped.append((gl, key, v, t))
            else:
                try:
                    v = key.cell_contents
                except ValueError:   # an empty cell
                    continue
                if type(v) in NUMBERS:
                    t = state.input(k, label, key, None, v)
                    key.cell_contents = t
                    swapped.append((None, key, v, t))
        _swap_entries(state, keys, refs, entries)
        yield
    finally:
        for gl, key, v, t in swapped:
            if gl is not None:
                if gl.get(key) is t:
                    gl[key] = v
            elif key.cell_contents is t:
                key.cell_contents = v
        for owner, name, v, t in reversed(entries):
            if _get(owner, name) is t:
                _set(owner, name, v)
        _tls.state = before


def _get(owner, name):
    return owner[name] if type(owner) in (list, dict) else vars(owner).get(name)


def _set(owner, name, value) -> None:
    if type(owner) in (list, dict):
        owner[name] = value
    else:
        vars(owner)[name] = value


def _swap_entries(state: "_State", keys: set, refs, swapped: list) -> None:
    """Swap the number entries of containers and plain objects the references reach
    (value_snapshot.entry_key: ``opt.param_groups[0]["lr"]``, ``cfg.lr``) that are among
    `keys` for their inputs, adding (owner, name, number, input) to `swapped` to put back."""
    from .python_refs import _now
    from .value_snapshot import entry_key, guarded_attrs, plain_object
    wanted = {k for k in keys if k[0] in ("item", "attr")}
    if not wanted:
        return
    seen: set = set()
    todo = [(_now(gl, key), label) for label, gl, key in refs]
    while todo and len(seen) < 4096:
        v, label = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        t = type(v)
        if t in (list, dict):
            items = list(enumerate(v) if t is list else v.items())
        elif plain_object(v):
            items = list(vars(v).items())
        else:
            todo.extend((getattr(v, k), f"{label}.{k}") for k in guarded_attrs(v))
            continue
        for name, x in items:
            where = f"{label}[{name!r}]" if t in (list, dict) else f"{label}.{name}"
            k = entry_key(v, name)
            if type(x) in NUMBERS and k in wanted:
                inp = state.input(k, where, v, name, x)
                _set(v, name, inp)
                swapped.append((v, name, x, inp))
            elif type(x) in (list, dict) or plain_object(x) or guarded_attrs(x):
                todo.append((x, where))


def lifted_attribute(module, name: str, value):
    """`value` read as ``module.name`` in a capture: its runtime input where that number is
    one of the capture's keys, else `value`."""
    state = getattr(_tls, "state", None)
    if state is None:
        return value
    key = ("attr", id(module), name)
    if key not in state.keys:
        return value
    return state.input(key, f"{type(module).__name__}.{name}", module, name, value)


def written(obj, name: str) -> None:
    """``obj.name`` is set in the capture: later reads there see the value set."""
    state = getattr(_tls, "state", None)
    if state is not None:
        state.keys.discard(("attr", id(obj), name))


def changed_numbers(check) -> set:
    """The keys of the numbers a call found changed in an entry's extra guard (`check`:
    a module state check, a references check, or several)."""
    if check is None:
        return set()
    inner = getattr(check, "checks", None)
    if inner is not None:
        return set().union(*(changed_numbers(c) for c in inner))
    fn = getattr(check, "changed_numbers", None)
    return fn() if fn is not None else set()


def refs_of(guard) -> list:
    """The global and closure references a compiled function's extra guard watches
    (python_refs.py; a compiled module's: its forwards')."""
    refs = getattr(guard, "refs", None)
    return refs if isinstance(refs, list) else getattr(refs, "refs", None) or []
