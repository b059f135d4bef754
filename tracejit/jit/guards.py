"""Guards: the cheap check that a call matches a compiled entry.

Each input leaf of a captured call is described by a `LeafDesc`. From the list of
descriptions we generate the source of one small Python function (readable, and
registered with linecache so it shows in tracebacks) that checks, per tensor: dtype,
device, requires_grad, rank and each static dim; symbolic dims are checked to be
>= 2 and consistent where they share a symbol; specialized Python values are compared;
plus grad mode. Generated straight-line code keeps a hit at about a microsecond.
"""
from __future__ import annotations

import itertools
import linecache
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .scalars import same_number

__all__ = ["LeafDesc", "MISS", "PendingGuard", "build_guard", "describe_difference", "limit_message"]


@dataclass(frozen=True)
class LeafDesc:
    kind: str                   # "tensor" | "scalar" (runtime number) | "const" (specialized value)
    name: str                   # the user's name for it: "x", "args[1]", "batch['a']"
    dtype: Any = None
    device: Any = None
    requires_grad: bool = False
    shape: tuple = ()           # ints, or symbol names (str) for dynamic dims
    value: Any = None           # scalar type (for "scalar"), the value (for "const")

    def text(self) -> str:
        if self.kind == "tensor":
            dims = ",".join(str(d) for d in self.shape)
            if self.value is not None:   # a numpy array argument (numpy_args.py)
                return f"{self.name}: ndarray {self.value}[{dims}]"
            rg = ", requires_grad" if self.requires_grad else ""
            return f"{self.name}: Tensor {self.dtype.short}[{dims}] on {self.device}{rg}"
        if self.kind == "scalar":
            return f"{self.name}: any {self.value.__name__} (runtime input)"
        if self.value is not None and not isinstance(self.value, bool) and not _eq_comparable(self.value):
            return f"{self.name} is {_short(self.value)} (by identity: its attributes are not guarded)"
        return f"{self.name} == {self.value!r}"


# Names for the guards' pseudo-files; ``next`` on a count is atomic, so two threads
# capturing at once never get one name (as ``n[0] += 1`` could).
_names = itertools.count(1)


MISS = object()  # what a hit function returns when its guard fails


def build_guard(descs: list, const_descs: list, grad_mode: bool, extra=None, on_pass=None,
                decisions=None, compiled: bool = True, autocast=None, default_dtype=None):
    """Return (guard(leaves, consts, grad_mode) -> bool, source).

    ``compiled=False``: the guard as a `PendingGuard`, its source compiled at its first
    call (a capture's entry: see there).

    ``autocast`` is the autocast dtype the capture ran under (None: off): a call under
    another state misses, so entering autocast captures again and leaving it hits the
    float32 entry (one list read while no autocast context is active). ``default_dtype``
    is `get_default_dtype()` at capture (None: not checked): what ``tj.zeros(3)`` and
    Python floats became there.

    ``decisions`` is a ``check(leaves) -> bool`` for the Python decisions capture took on
    runtime scalar arguments (see `scalars`), run after the leaves' own checks.

    With ``on_pass = (lines, names)``, build instead the entry's *hit* function,
    ``hit(L, gm)``: the same checks, returning `MISS` when one fails and otherwise running
    ``lines`` (source at function-body indent, outside the ``try`` so errors raised while
    running are not mistaken for a failed guard) with ``names`` as globals. Guard and run
    in one generated function keep a cache hit to one Python call.
    """
    # Every failed check does ``return NO``: False for a guard, MISS for a hit function.
    from .. import dtypes as _dt
    from ..ops import autocast as _ac
    g: dict = {"EXTRA": extra, "DECIDED": decisions, "NO": False if on_pass is None else MISS,
               "ACN": _ac.ENTERED, "ACS": _ac.STATE, "ACK": autocast, "DT": _dt, "KDF": default_dtype}
    if on_pass is not None:
        g.update(on_pass[1])
    head = "def hit(L, gm):" if on_pass is not None else "def guard(L, C, gm):"
    lines = [head,
             f"    if gm is not {grad_mode!r}:",
             "        return NO",
             "    if (ACS.dtype if ACN[0] else None) is not ACK:",
             "        return NO"]
    if default_dtype is not None:
        lines += ["    if DT._default_float is not KDF:", "        return NO"]
    lines += ["    try:"]
    seen: set = set()

    def tensor_checks(expr, i, d, tag):
        g[f"D{tag}{i}"] = d.dtype
        g[f"V{tag}{i}"] = d.device
        same = (f"t.dtype is not D{tag}{i} or t.device is not V{tag}{i} or "
                f"t._requires_grad is not {d.requires_grad!r}")
        shape = "t._data.shape"
        if d.value is not None:   # a numpy array: its class, dtype object and shape
            g[f"D{tag}{i}"], g["ND"], shape = d.value, np.ndarray, "t.shape"
            same = f"t.__class__ is not ND or t.dtype is not D{tag}{i}"
        if all(isinstance(x, int) for x in d.shape):
            # One statement a tensor: a guard is compiled in every capture (~5 us a line
            # of source), and a hit runs it without storing the shape.
            return [f"        t = {expr}",
                    f"        if {same} or {shape} != {tuple(d.shape)!r}:",
                    "            return NO"]
        out = [f"        t = {expr}", f"        if {same}:", "            return NO",
               f"        s = {shape}"]
        out += [f"        if len(s) != {len(d.shape)}:", "            return NO"]
        for j, dim in enumerate(d.shape):
            if isinstance(dim, int) or dim in seen:
                out += [f"        if s[{j}] != {dim}:", "            return NO"]
            else:
                seen.add(dim)
                out += [f"        {dim} = s[{j}]", f"        if {dim} < 2:", "            return NO"]
        return out

    for i, d in enumerate(descs):
        if d.kind == "tensor":
            lines += tensor_checks(f"L[{i}]", i, d, "")
        elif d.kind == "scalar":   # (a float input takes numpy's float64 too: capture.py)
            g[f"T{i}"], g["F64"] = d.value, np.float64
            alt = f" and L[{i}].__class__ is not F64" if d.value is float else ""
            lines += [f"        if L[{i}].__class__ is not T{i}{alt}:", "            return NO"]
        else:
            g[f"K{i}"] = d.value
            v = d.value
            if v is None or isinstance(v, (bool,)) or not _eq_comparable(v):
                lines += [f"        if L[{i}] is not K{i}:", "            return NO"]
            elif isinstance(v, float) and v != v:  # nan: equal to nothing, but the same value
                lines += [f"        if L[{i}].__class__ is not float or L[{i}] == L[{i}]:",
                          "            return NO"]
            elif isinstance(v, float) and v == 0.0:  # 0.0 == -0.0, but 1/x tells them apart
                g["SAME"] = _same_value
                lines += [f"        if not SAME(K{i}, L[{i}]):", "            return NO"]
            else:
                lines += [f"        if L[{i}].__class__ is not K{i}.__class__ or L[{i}] != K{i}:",
                          "            return NO"]
    for i, d in enumerate(const_descs):
        lines += tensor_checks(f"C[{i}]", i, d, "c")
    if decisions is not None:
        lines += ["        if not DECIDED(L):", "            return NO"]
    if extra is not None:
        lines += ["        if not EXTRA():", "            return NO"]
    lines += ["    except (AttributeError, TypeError, IndexError, ValueError):", "        return NO"]
    lines += on_pass[0] if on_pass is not None else ["    return True"]
    src = "\n".join(lines) + "\n"
    fname = f"<tracejit-guard-{next(_names)}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    name = "hit" if on_pass is not None else "guard"
    if not compiled:
        return PendingGuard(src, fname, g, name), src
    exec(compile(src, fname, "exec"), g)
    return g[name], src


class PendingGuard:
    """A generated guard not compiled yet: ``function()`` compiles it (once) and returns
    it. An entry's plain guard is called only off the hot path (the hot path runs the
    entry's generated hit function, which checks the same things), and compiling its
    source (~2.8 KB for LeNet's forward: 0.7 ms) is a third of building it in every
    capture. Its source is in linecache under its pseudo-file name from the start."""

    __slots__ = ("source", "filename", "_globals", "_name", "_fn")

    def __init__(self, source: str, filename: str, globals_: dict, name: str):
        self.source, self.filename = source, filename
        self._globals, self._name, self._fn = globals_, name, None

    def function(self):
        fn = self._fn
        if fn is None:   # (two threads at once both compile it: the same function either way)
            g = self._globals
            exec(compile(self.source, self.filename, "exec"), g)
            fn = self._fn = g[self._name]
        return fn


def _eq_comparable(v) -> bool:
    """Values guarded by ``==`` (others by identity). Arrays are guarded by identity: their
    ``==`` is elementwise, and an equal-looking array can be mutated later anyway."""
    if isinstance(v, (int, float, str, bytes, tuple, frozenset)):
        return True
    if hasattr(v, "__array__") or hasattr(v, "shape"):
        return False
    return type(v).__eq__ is not object.__eq__


def describe_difference(old: list, new: list, old_gm: bool, new_gm: bool,
                        static: Optional[dict] = None) -> list:
    """Human-readable reasons why `new` leaves fail `old`'s guard; `static`: (name, dim) ->
    why that dim is kept static."""
    reasons = []
    if old_gm != new_gm:
        reasons.append(f"grad mode changed: {old_gm} -> {new_gm}")
    if len(old) != len(new):
        reasons.append(f"number of inputs changed: {len(old)} -> {len(new)}")
        return reasons
    shared: dict = {}   # symbol -> (input, dim, size now): dims equal at capture share one
    for o, n in zip(old, new):
        if o.kind != n.kind:
            reasons.append(f"input {o.name!r}: {_kind_change(o, n)}")
        elif o.kind == "tensor":
            if (o.value is None) != (n.value is None):
                reasons.append(f"input {o.name!r}: type guard failed: "
                               f"{'a tensor -> an ndarray' if o.value is None else 'an ndarray -> a tensor'}")
            elif o.dtype is not n.dtype:
                reasons.append(f"input {o.name!r}: dtype guard failed: {o.dtype.name} -> {n.dtype.name}")
            if o.device != n.device:
                reasons.append(f"input {o.name!r}: device guard failed: {o.device} -> {n.device}")
            if o.requires_grad != n.requires_grad:
                reasons.append(f"input {o.name!r}: requires_grad guard failed: {o.requires_grad} -> {n.requires_grad}")
            if len(o.shape) != len(n.shape):
                reasons.append(f"input {o.name!r}: rank guard failed: {len(o.shape)} -> {len(n.shape)}")
            else:
                for j, (a, b) in enumerate(zip(o.shape, n.shape)):
                    if isinstance(a, int) and a != b:
                        why = static.get((o.name, j)) if static else None
                        reasons.append(f"input {o.name!r}: size guard failed: dim {j} was {a}, now {b}"
                                       + (f" (kept static: {why})" if why else ""))
                    elif isinstance(a, str) and b < 2:
                        reasons.append(f"input {o.name!r}: dim {j} ({a}) is symbolic for sizes >= 2, now {b}")
                    elif isinstance(a, str) and shared.setdefault(a, (o.name, j, b))[2] != b:
                        first = shared[a]
                        reasons.append(f"input {o.name!r}: dim {j} ({a}) was equal to dim {first[1]} of "
                                       f"{first[0]!r} at capture, now {b} vs {first[2]}")
        elif o.kind == "scalar":
            if o.value is not n.value:
                reasons.append(f"input {o.name!r}: type guard failed: {o.value.__name__} -> {n.value.__name__}")
        else:
            if not (o.value is n.value or _same_value(o.value, n.value)):
                if o.value is not None and not isinstance(o.value, bool) and not _eq_comparable(o.value):
                    why = ("a different numpy array: numpy code or Python read its values, so it is a "
                           "constant of the capture; pass tensors to reuse it" if isinstance(n.value, np.ndarray)
                           else "a different object")
                    reasons.append(f"input {o.name!r}: identity guard failed: {_short(o.value)} -> "
                                   f"{_short(n.value)} ({why})")
                else:
                    reasons.append(f"input {o.name!r}: value guard failed: {o.value!r} -> {n.value!r}")
    return reasons


def limit_message(name: str, fn, limit: int, reasons: list) -> str:
    """The warning of a function past its recompile limit: where it is defined, the guard
    that failed last, and what would avoid the captures."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    last = reasons[-1] if reasons else "unknown"
    # (a dim kept static because code needs its value stays static under dynamic=True too)
    fix = "" if "kept static" in last else ", or mark the changing inputs dynamic=True"
    return (f"tracejit: {name}{where} hit the recompile limit ({limit}) and now runs eagerly for "
            f"new input signatures. Last reason: {last}. Raise the limit with recompile_limit={fix}; "
            f"TRACEJIT_LOG=recompiles logs every reason.")


def _kind_change(o: LeafDesc, n: LeafDesc) -> str:
    def what(d):
        if d.kind == "scalar":
            return f"{d.value.__name__} (a runtime input)"
        if d.kind == "const":
            return f"{type(d.value).__name__} {_short(d.value)}"
        return "a tensor"
    if "tensor" in (o.kind, n.kind):
        return f"kind changed: {o.kind} -> {n.kind}"
    return f"type guard failed: {what(o)} -> {what(n)}"


def _same_value(a, b) -> bool:
    if not _eq_comparable(a) or type(a) is not type(b):
        return False
    if isinstance(a, float):
        return same_number(a, b)
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that doesn't give a truth value
        return False


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."
