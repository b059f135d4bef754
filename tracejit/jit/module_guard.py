"""The guard a compiled module's captures carry: the module tree they were captured with.

A capture reads the module's state while tracing: the plain attributes the forwards read
(``self.training`` in Dropout and BatchNorm, ``self.temperature = 2.0``, ``self.use_bias``),
which become constants of the graph, and its tensors (parameters, buffers, tensor
attributes), which the entry holds by identity. A later call is only right for the same
state, so the guard checks it:

- nothing moved since the last look (``nn.module.state_epoch``, moved by every
  ``setattr``/``delattr``/``register_*`` on any module): valid, one integer compare; where
  only compiled calls rebound tensor attributes since (``nn.rebinds.rebound``), valid unless
  one of them is in this tree;
- otherwise it looks again: the same submodule objects at the same names, the same flags,
  the same values of the attributes the capture read (`recording` notes them; one the
  forward never reads, a step counter say, may change freely), else the call misses and
  captures again (the reason names the attribute). A tensor rebound by name (``m.weight = nn.Parameter(...)``, the
  weight-norm hook's recomputed weight, ``self.mask = new``) with the same dtype, shape and
  requires_grad is put in the entry's place for it, so the call runs without recapture.

Another module of the class with the same state (`_StateCheck.for_sibling`) runs the capture
on its own tensors: parameters are inputs of the graph, not constants.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Optional

import numpy as np

from ..nn import module as _module
from ..nn import rebinds as _rebinds
from ..nn.module_hooks import global_hook_ids
from ..ops import registry as _reg
from ..tensor import Tensor
from .lifted import NUMBERS, lifted_attribute
from .value_snapshot import BUDGET, SCALARS, differs, unchanged, watcher, worth_watching

__all__ = ["ModuleStateGuard", "recording", "with_module_arguments", "sibling_check", "map_state"]


def _plain(v) -> bool:
    """A value a capture may have turned into a constant: compared by value."""
    if isinstance(v, SCALARS):
        return True
    return isinstance(v, tuple) and len(v) <= 16 and all(isinstance(x, SCALARS) for x in v)


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


_reads = threading.local()     # .found: the (id(module), name) reads of the capture in this thread
_installs = [0]
_install_lock = threading.Lock()


def _noting_getattribute(self, name: str):
    value = object.__getattribute__(self, name)
    found = getattr(_reads, "found", None)
    if found is not None:
        if _plain(value):
            found.add((id(self), name))
            if type(value) in NUMBERS:   # (one that keeps changing: a runtime input, lifted.py)
                value = lifted_attribute(self, name, value)
        elif name[:2] != "__" and worth_watching(value):
            found.add((id(self), name))
            if _reg.trace_state.tracer is not None:
                if type(value) in (list, dict, set):
                    _module._capture_effects().watch(f"attribute {type(self).__name__}.{name}", value,
                                                     lambda m=self, n=name: object.__getattribute__(m, n),
                                                     cache=True)
                else:   # (a plain object: what the forward stores on it)
                    _module._capture_effects().watch_object(value, self, name)
        elif isinstance(value, (np.random.Generator, np.random.RandomState)) and _reg.trace_state.tracer is not None:
            _module._capture_effects().watch_generator(f"`{type(self).__name__}.{name}`", value)
    return value


@contextlib.contextmanager
def recording():
    """Within: the plain attributes this thread reads from any module are noted (yields
    the set). Module attribute reads pay for it only while some capture records."""
    Module = _module.Module
    with _install_lock:
        if _installs[0] == 0:
            Module.__getattribute__ = _noting_getattribute
        _installs[0] += 1
    before = getattr(_reads, "found", None)
    found: set = set()
    _reads.found = found
    try:
        yield found
    finally:
        _reads.found = before
        if before is not None:
            before |= found
        with _install_lock:
            _installs[0] -= 1
            if _installs[0] == 0:
                del Module.__getattribute__


def read_in_capture(module, name: str) -> Optional[bool]:
    """Whether the capture recording in this thread read ``module.name`` so far (None: none
    records)."""
    found = getattr(_reads, "found", None)
    return None if found is None else (id(module), name) in found


def _attrs(m, read: Optional[set]) -> dict:
    """The plain attributes of `m` in `read` (None: every plain one). A forward that never
    reads ``training`` (a conv, GroupNorm) serves train and eval alike."""
    return {k: v for k, v in vars(m).items() if (read is None or (id(m), k) in read) and _plain(v)}


def _none_slots(m) -> frozenset:
    """The names of `m`'s parameters and buffers registered as None."""
    d = vars(m)
    return frozenset(k for table in ("_parameters", "_buffers") for k, v in (d.get(table) or {}).items()
                     if v is None)


_HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def _hooks(m) -> tuple:
    """The ids of `m`'s registered hooks, and of every module's, by kind: a capture ran the
    ones there were."""
    d = vars(m)
    return tuple(tuple(d.get(k) or ()) for k in _HOOK_TABLES) + global_hook_ids()


def _deep_attrs(mods: list, names: list, read: Optional[set], writes=()) -> list:
    """(name, module, attribute, snapshot) of the containers and plain objects the capture
    read from module attributes: their contents can change without a setattr, so they are
    compared on every call (not those it set before reading them: each call sets them)."""
    if not read:
        return []
    budget = [BUDGET]
    set_first = {(id(w[1]), w[2]) for w in writes if w and w[0] == "tree"}
    return [(n, m, k, watcher(v, budget)) for n, m in zip(names, mods) for k, v in vars(m).items()
            if (id(m), k) in read and (id(m), k) not in set_first and not _plain(v) and worth_watching(v)]


class ModuleStateGuard:
    """Made per compiled module; `snapshot` gives each capture its check."""

    def __init__(self, module: Any):
        self.module = module
        self._refs: Any = False   # looked for at the first capture (a deepcopy builds this half-made)

    @property
    def refs(self):
        """The guard on the globals the module's forwards read, or None."""
        if self._refs is False:
            from .python_refs import forward_refs_guard
            self._refs = forward_refs_guard(self.module)
        return self._refs

    def recording(self, modules: bool = True):
        return recording() if self.refs is None else self.refs.recording(modules=True)

    def snapshot(self, consts: Optional[list] = None, writes=(), read: Optional[set] = None,
                 lifted: frozenset = frozenset()):
        """The check of a capture; `lifted`: the keys of the numbers it read as runtime
        inputs (lifted.py), checked by type only."""
        consts = consts if consts is not None else []
        # (the compiled module's own hooks run eagerly around its compiled forward)
        check = _StateCheck(self.module, consts, writes, read, root_hooks=False, lifted=lifted)
        if self.refs is None:
            return check
        return _AllChecks([check, self.refs.snapshot(consts, writes, read, lifted)])


class _StateCheck:
    def __init__(self, root, consts: list, writes, read: Optional[set], root_hooks: bool = True,
                 lifted: frozenset = frozenset()):
        named = list(root.named_modules())
        self.lifted = lifted
        self.root = root
        self.names = [n or type(root).__name__ for n, _ in named]
        self.mods = [m for _, m in named]
        self.attrs = [_attrs(m, read) for m in self.mods]
        self.root_hooks = root_hooks   # False: the root's hooks are not part of the capture
        self.hooks = [_hooks(m) if k or root_hooks else () for k, m in enumerate(self.mods)]
        self.nones = [_none_slots(m) for m in self.mods]   # (a None buffer set to a tensor later)
        self.deep = _deep_attrs(self.mods, self.names, read, writes)
        # where each captured tensor lives in the tree: (module, kind, name), or None
        where: dict = {}
        for m in self.mods:
            for kind, table in (("a", vars(m)), ("b", m._buffers), ("p", m._parameters)):
                for k, v in table.items():
                    if isinstance(v, Tensor):
                        where[id(v)] = (m, kind, k)
        self.consts = consts          # the entry's list: a rebound tensor is put in its place
        self.paths = [where.get(id(t)) for t in consts]
        self.written = {id(w[1]) for w in writes if w and w[0] == "buffer"}
        self.writes = writes
        self.epoch = _module.state_epoch[0]
        self.rebinds = _rebinds.rebind_epoch[0]

    def __call__(self) -> bool:
        if self.deep:
            for _, m, k, w in self.deep:
                if not unchanged(w, vars(m).get(k)):
                    return False
        if _module.state_epoch[0] == self.epoch:
            if _rebinds.rebind_epoch[0] == self.rebinds:
                return True
            rebound, seen = _rebinds.rebound, self.rebinds
            if not any(rebound.get(id(m), -1) > seen for m in self.mods):
                self.rebinds = _rebinds.rebind_epoch[0]   # (only other trees' tensors moved)
                return True
        return self._look()

    def _look(self) -> bool:
        epoch, rebinds = _module.state_epoch[0], _rebinds.rebind_epoch[0]
        if self._differences(stop_at_first=True):
            return False
        swaps = []
        for i, path in enumerate(self.paths):
            if path is None:
                continue
            now = _tensor_at(*path)
            old = self.consts[i]
            if now is old:
                continue
            if (not isinstance(now, Tensor) or id(old) in self.written or now.dtype is not old.dtype
                    or now.device != old.device or tuple(now.shape) != tuple(old.shape)
                    or now.requires_grad != old.requires_grad):
                return False
            swaps.append((i, now))
        for i, now in swaps:
            self.consts[i] = now
        self.epoch, self.rebinds = epoch, rebinds
        return True

    def _differences(self, stop_at_first: bool = False) -> list:
        """Why the tree's state differs from the capture's (the first reason only, with
        `stop_at_first`)."""
        out = []
        named = list(self.root.named_modules())
        if len(named) != len(self.mods) or any(m is not old for (_, m), old in zip(named, self.mods)):
            was, now = set(self.names), {n or type(self.root).__name__ for n, _ in named}
            changed = sorted((was ^ now) or {n or type(self.root).__name__ for (n, m), old in
                                             zip(named, self.mods) if m is not old})
            return [f"submodules changed: {', '.join(changed) or 'their order'}"]
        for k, (n, m, attrs, hooks) in enumerate(zip(self.names, self.mods, self.attrs, self.hooks)):
            if (k or self.root_hooks) and _hooks(m) != hooks:
                out.append(f"module {n!r}: its hooks changed (one was registered or removed)")
            filled = self.nones[k] - _none_slots(m)
            if filled:   # (a tensor set to None since: the captured tensors' paths tell, if read)
                out.append(f"module {n!r}: parameters or buffers no longer None: {', '.join(sorted(filled))}")
            d = vars(m)
            for k in attrs:
                if ("attr", id(m), k) in self.lifted:   # a runtime input: any number of its type
                    if type(d.get(k)) is not type(attrs[k]):
                        out.append(f"module {n!r}: attribute {k!r} (any {type(attrs[k]).__name__}, a "
                                   f"runtime input) is now {d.get(k, '<unset>')!r}")
                elif k not in d or not _same(attrs[k], d[k]):
                    what = ("training guard failed" if k == "training" else f"attribute {k!r} changed")
                    out.append(f"module {n!r}: {what}: {attrs.get(k, '<unset>')!r} -> "
                               f"{d.get(k, '<unset>')!r}")
            if out and stop_at_first:
                return out
        for n, m, k, w in self.deep:
            d = differs(w[2], vars(m).get(k))
            if d is not None:
                out.append(f"module {n!r}: attribute {k!r} changed: {d}")
        return out

    def changed_numbers(self) -> set:
        """The keys (lifted.py) of the number attributes read at capture that hold another
        number of their type now."""
        out = set()
        for m, attrs in zip(self.mods, self.attrs):
            d = vars(m)
            for k, v in attrs.items():
                if type(v) in NUMBERS and type(d.get(k)) is type(v) and not _same(v, d[k]):
                    out.add(("attr", id(m), k))
        return out

    def text(self) -> str:
        flags = ", ".join(f"{n}={a['training']}" for n, a in zip(self.names, self.attrs) if "training" in a)
        read = sorted((f"{n}.{k}" if n != self.names[0] else k)
                      + (f" (any {type(a[k]).__name__})" if ("attr", id(m), k) in self.lifted else "")
                      for n, m, a in zip(self.names, self.mods, self.attrs) for k in a if k != "training")
        return (f"training flags read: {flags or 'none'}; attributes read: {', '.join(read) or 'none'}; the "
                f"submodules and their tensors as captured (looked at again after a module changes)")

    def describe(self) -> list:
        out = self._differences()
        return out or ["a tensor of the module was rebound with another dtype, shape or "
                       "requires_grad, or a written buffer was rebound"]

    def for_sibling(self, root) -> Optional[tuple]:
        """For `root`, another module of the class this capture was taken on: (the check of
        the capture for root, the captured tensors' counterparts in root, a map of this
        tree's modules and tensors to root's), or None when root's state differs from what
        the capture read: its tree's structure or types, the attributes read, a parameter
        present in one and None in the other, an attribute held by identity (a function),
        a hook. Parameters are inputs: root's take the places of this module's."""
        named = list(root.named_modules())
        if (self.lifted or len(named) != len(self.mods)
                or any(n != (k or type(root).__name__) or type(m) is not type(a)
                       for (k, m), n, a in zip(named, self.names, self.mods))):
            return None
        mine = [m for _, m in named]
        objs, back = {}, {}   # (one to one: a weight tied in one tree and not the other differs)
        for k, (a, m) in enumerate(zip(self.mods, mine)):
            if not self._same_shape(a, m, k):
                return None
            pairs = [(a, m)] + [(t, vars(m)[table][name]) for table in ("_parameters", "_buffers")
                                for name, t in vars(a)[table].items() if t is not None]
            pairs += [(t, vars(m)[name]) for name, t in vars(a).items() if isinstance(t, Tensor)]
            for x, y in pairs:
                if objs.setdefault(id(x), y) is not y or back.setdefault(id(y), x) is not x:
                    return None
        consts, held = [], None
        for path, t in zip(self.paths, self.consts):
            if path is None:   # a global's, or made by the capture (pad's indices): shared
                held = _held_tensors(self.mods) if held is None else held
                if id(t) in held:   # (one in a container of this tree: this module's own)
                    return None
                consts.append(t)
                continue
            t = _tensor_at(objs[id(path[0])], path[1], path[2])
            if not isinstance(t, Tensor):
                return None
            consts.append(t)
        read = {(id(mine[k]), name) for k, attrs in enumerate(self.attrs) for name in attrs}
        read |= {(id(objs[id(m)]), name) for _, m, name, _ in self.deep}
        writes = [map_state(w, objs) for w in self.writes]
        if None in writes:
            return None
        check = _StateCheck(root, consts, writes, read, self.root_hooks)
        if any(a.keys() != b.keys() or not all(_same(a[k], b[k]) for k in a)
               for a, b in zip(self.attrs, check.attrs)):
            return None
        if any(not unchanged(w, vars(objs[id(m)]).get(k)) for _, m, k, w in self.deep):
            return None
        return check, consts, objs

    def _same_shape(self, a, m, k: int) -> bool:
        """Whether module `m` matches this tree's `a` (index `k`) in what the capture did not
        note: parameters and buffers present, hooks, attributes held by identity."""
        da, dm = vars(a), vars(m)
        if ((k or self.root_hooks) and (any(self.hooks[k]) or any(_hooks(m)))) or da.keys() != dm.keys():
            return False
        for table in ("_parameters", "_buffers"):
            if [(n, t is None) for n, t in da[table].items()] != [(n, t is None) for n, t in dm[table].items()]:
                return False
        for name, v in dm.items():
            w = da[name]
            if isinstance(v, Tensor) or name in _MACHINERY or "hook" in name:
                if isinstance(w, Tensor) != isinstance(v, Tensor):
                    return False
            elif not (_plain(v) or worth_watching(v)) and v is not w:
                return False
        return True


def _tensor_at(m, kind: str, name: str):
    """What module `m` holds as attribute (kind "a"), buffer ("b") or parameter ("p") `name`."""
    return (vars(m) if kind == "a" else m._buffers if kind == "b" else m._parameters).get(name)


def _held_tensors(mods: list) -> set:
    """The ids of the tensors held in the containers and plain objects that `mods` hold."""
    out: set = set()

    def walk(v, depth: int) -> None:
        if isinstance(v, Tensor):
            out.add(id(v))
        elif depth and worth_watching(v):
            for x in (v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple, set, frozenset))
                      else vars(v).values()):
                walk(x, depth - 1)
    for m in mods:
        for v in vars(m).values():
            if not isinstance(v, Tensor):
                walk(v, 4)
    return out


def map_state(w: tuple, objs: dict) -> Optional[tuple]:
    """A state write of a capture (state_writes.py) moved to another module's tree by
    `objs` (`_StateCheck.for_sibling`), or None when it writes elsewhere."""
    if w[0] in ("args", "rebind"):
        return w
    if w[0] in ("buffer", "attr", "number", "const") and id(w[1]) in objs:
        return (w[0], objs[id(w[1])]) + tuple(w[2:])
    return None


_MACHINERY = frozenset(vars(_module.Module()))


def sibling_check(extra, root) -> Optional[tuple]:
    """`_StateCheck.for_sibling` of a compiled module's capture whose check is `extra` (its
    state check, with the check of the globals its forwards read), for module `root`."""
    refs = None
    if type(extra) is _AllChecks and len(extra.checks) == 2 and not getattr(extra.checks[1], "modules", True):
        extra, refs = extra.checks   # (globals: one check serves every module of the class)
    if type(extra) is not _StateCheck or (refs is not None and not refs()):
        return None
    found = extra.for_sibling(root)
    if found is None or refs is None:
        return found
    return (_AllChecks([found[0], refs]),) + found[1:]


class _AllChecks:
    """Several state checks as one: the function's own and one per module argument."""

    def __init__(self, checks: list):
        self.checks = checks

    def __call__(self) -> bool:
        for c in self.checks:
            if not c():
                return False
        return True

    def text(self) -> str:
        return "; ".join(c.text() for c in self.checks if hasattr(c, "text"))

    def describe(self) -> list:
        out = []
        for c in self.checks:
            if not c():
                describe = getattr(c, "describe", None)
                out += describe() if describe is not None else ["a custom guard failed"]
        return out


def with_module_arguments(check, modules: list, consts: list, writes, read: Optional[set],
                          lifted: frozenset = frozenset()):
    """`check` (or None) extended with the state check of each module passed as an
    argument, which a capture also reads through: a parameter or buffer rebound by name
    (``m.w = nn.Parameter(...)``) is put in the entry's place, another change captures again."""
    checks = [] if check is None else [check]
    checks += [_StateCheck(m, consts, writes, read, lifted=lifted) for m in modules]
    if not checks:
        return None
    return checks[0] if len(checks) == 1 else _AllChecks(checks)
