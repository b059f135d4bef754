"""Python side effects seen while a function is captured.

A capture runs the function's Python code once, on tracers; the graph then replays only
its tensor work. Python state the code changes (``self.steps += 1``, ``self.log.append``,
a forward hook storing activations, a global list appended to) would change once instead
of on every call, and a tracer stored that way would escape into the program. So a
capture notes such changes and, when it sees one, puts the state back and refuses with a
`TraceError` naming it: ``tracejit.compile`` (fullgraph=False) then runs the function
eagerly, as often as the program calls it, with one warning; ``trace``/``script`` raise.

What is watched: plain attributes a module's code sets during the capture (tensor
attributes, and numbers set over numbers, are graph outputs written back per call, and
other constants it sets before reading them are set again per call, see state_writes.py),
lists, dicts and sets read from module attributes or named by the function's globals and
closure, the attributes of plain objects passed in or read from module attributes, and
forward hooks that return nothing (they run for their effect; a hook that returns a new
output is part of the graph). Hooks tracejit installs itself are marked ``_traceable``.
A global or closure list or dict that only gets the capture's traced tensors appended or
set (a hook keeping activations, as torch.compile replays it), or a module's list or dict
whose None or empty entries get them (YOLOv5's grid cache), does not refuse: the graph
outputs them and each call stores them into the container the name then holds. Lists and
dicts passed in (fairseq's ``incremental_state``) are the capture's copies: what it stores
into them, numbers counted in them included, is a result that each call stores into its
own (`EffectLog.argument_writes`, entry.py), as torch.compile replays such mutations.

``print()`` changes no state the program reads, so it does not refuse the capture: it
runs once, while capturing, and `printing_noted` notes where, for one warning that
compiled calls will not print. A call of Python's or numpy's random or clock functions
(``random.random()``, ``np.random.rand()``, ``time.time()``) gives a number the graph
would keep: a capture that refuses effects refuses it too, and ``trace``/``script`` warn.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types
from typing import Any, Callable

import numpy as np

from ..autograd.grad_mode import _state as _grad_state
from ..errors import TraceError
from ..ops import eager as _eager
from ..tensor import Tensor
from .pytree import flatten, unflatten
from .python_refs import global_names
from .value_snapshot import plain_object

__all__ = ["EffectLog", "passed_in_place", "printing_noted"]

_CONTAINERS = (list, dict, set)
_MISSING = object()


class EffectLog:
    """The effects of one capture attempt, and what puts them back."""

    def __init__(self) -> None:
        self.active = False                   # set by a capture that refuses effects
        self.notes: list = []                 # descriptions, in order seen
        self._writes: dict = {}               # (id(obj), name) -> (obj, name, value before)
        self._watched: dict = {}              # id(container) -> (label, container, copy)
        self.prints: list = []                # "file:line" of each print() the capture ran
        self.values: list = []                # "random.random() at file:line": values a graph keeps
        self._rng: dict = {}                  # module name -> (its state setter, state before)
        self._generators: dict = {}           # id(numpy generator) -> (label, it, its state before)
        self._hooks: list = []                # (note, hook) of hooks run for their effect
        self.stores: list = []                # (find, key or None to append, tracer): see found()
        self._passed: list = []               # (value, flatten(value)) per parameter: argument_writes
        self._passed_ids: set = set()         # ids of the lists and dicts among them
        self._leaves: list = []               # the call's argument leaves
        self.arg_writes: list = []            # the parameters whose lists or dicts the capture changed
        self._owned: set = set()              # ids of containers a module attribute was set to (state_writes.py)

    # ---- noting ------------------------------------------------------------------
    def attribute_write(self, obj: Any, name: str) -> None:
        """``obj.name = <not a tensor>`` is about to run inside the capture."""
        key = (id(obj), name)
        if self.active and key not in self._writes:
            self._writes[key] = (obj, name, obj.__dict__.get(name, _MISSING))
            self.notes.append(f"it sets `{type(obj).__name__}.{name}`")

    def known(self, container: Any) -> bool:
        """Whether `container` existed before the capture: a global, closure or module
        container it reads, or one passed in (setting it on a module shares it, as eagerly)."""
        return id(container) in self._watched or any(v is container for v, _ in self._passed)

    def own(self, container: Any) -> None:
        """`container` was set as a module attribute and is written back by each call: what
        the capture puts into it is no effect."""
        self._owned.add(id(container))

    def hook(self, module: Any, hook: Callable, kind: str) -> None:
        if self.active and not getattr(hook, "_traceable", False):
            self._hooks.append((f"a forward {kind} of {type(module).__name__} "
                                f"({getattr(hook, '__qualname__', type(hook).__name__)}) runs for its effect", hook))

    def watch(self, label: str, value: Any, find: Callable = None, cache: bool = False) -> None:
        """Note a container's contents now, to compare when the capture ends; `find` gives
        the container a later call means (a global or closure variable, read again); `cache`:
        a module's container, see `_traced_stores`."""
        if self.active and type(value) in _CONTAINERS and id(value) not in self._watched \
                and id(value) not in self._owned and id(value) not in self._passed_ids:
            self._watched[id(value)] = (label, value, type(value)(value), find, cache)
            for v in value.values() if isinstance(value, dict) else value:   # (a generator kept in it)
                self.watch_generator(label, v)

    def watch_object(self, obj: Any, owner: Any = None, name: str = "") -> None:
        """If `obj` is a plain object (a cache, a store of activations) passed in, or read
        as ``owner.name``: its attributes and the containers among them, as `watch` does a
        container."""
        label = f"the {type(obj).__name__} argument" if owner is None else f"`{type(owner).__name__}.{name}`"
        self.watch_generator(label, obj)
        if self.active and plain_object(obj, library=True):
            self.watch(f"attributes of {label}", vars(obj))
            for n, v in vars(obj).items():
                self.watch(f"`{type(obj).__name__}.{n}`", v)
                self.watch_generator(f"`{type(obj).__name__}.{n}`", v)

    def watch_generator(self, label: str, obj: Any) -> None:
        """If `obj` is a numpy ``Generator`` or ``RandomState``: its state now, to compare
        when the capture ends (a draw from it gives numbers the graph would keep)."""
        if self.active and isinstance(obj, _GENERATORS) and id(obj) not in self._generators:
            self._generators[id(obj)] = (label, obj, _generator_state(obj))

    def watch_function(self, fn: Callable, arguments: list = (), passed: list = None) -> None:
        """The containers `fn`'s own code names in its globals and closure, the state of
        the plain objects among its `arguments` (a KV cache object the call updates), and
        the lists and dicts among the values it is `passed` (per parameter; a hook is
        passed none), for `argument_writes`. A container passed in that a hook's closure
        also names (a decoder's key/value cache its hooks fill) is watched as passed."""
        if passed is not None:
            self._passed, self._leaves = [(v, flatten(v)) for v in passed], arguments
            self._passed_ids = _container_ids(passed)
        code, gl = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
        if not self.active or code is None or gl is None:
            return
        for a in arguments:
            self.watch_object(a)
        for label, value, find in _named_values(fn):
            self.watch(label, value, find)
            self.watch_generator(label, value)
            if plain_object(value, library=True):   # (a sampler object keeping its generator)
                for n, v in vars(value).items():
                    self.watch_generator(f"`{type(value).__name__}.{n}`", v)

    def argument_writes(self, out: Any) -> Any:
        """`out`, with the lists and dicts passed in that the capture changed (fairseq's
        ``incremental_state`` filled and counted in) when there are some: ``(out, [their
        values now])``, and ``self.arg_writes`` their parameter indices, for each call to
        store into its own (entry.py). The capture got copies of them: the caller's stay
        as they were. A tensor passed in and kept there is marked by its leaf index (the
        call's own tensor is stored, as eagerly)."""
        passed = self._passed
        self.arg_writes = [i for i, (v, (leaves, spec)) in enumerate(passed)
                           if spec is not None and _changed_tree(v, leaves, spec)]
        if not self.arg_writes:
            return out
        before = [x for _, (leaves, _) in passed for x in leaves]
        # (a number passed in is traced as a tensor: its `+=` gives the new number)
        index = {id(x): ArgumentLeaf(j) for j, (x, a) in enumerate(zip(before, self._leaves))
                 if isinstance(a, Tensor)}
        now = [flatten(passed[i][0]) for i in self.arg_writes]
        return out, [unflatten(spec, [index.get(id(x), x) for x in leaves]) for leaves, spec in now]

    # ---- ending ------------------------------------------------------------------
    def found(self, out: Any = None) -> list:
        """Every effect of the capture so far (the containers changed included), and any
        object in the result `out` holding traced tensors (they would escape the graph).
        A global or closure list appended to, or dict set, with traced tensors only (a hook
        storing activations, as torch.compile replays it) is not one: it is put back and
        noted in `stores`, graph outputs each call stores (state_writes.py); a hook whose
        effect that is is not one either."""
        changed, stored = [], set()
        for label, v, before, find, cache in self._watched.values():
            if _changed(v, before):
                new = _traced_stores(v, before, cache) if find is not None else None
                if new is None:
                    changed.append(f"it changes the {type(v).__name__} {label}")
                else:
                    self.stores += [(find, k, t) for k, t in new]
                    stored.add(id(v))
        hooks = [note for note, h in self._hooks if not (stored and _only_stores(h, stored))]
        values = [f"it calls {v}, whose result a graph would keep" for v in self.values] if self.active else []
        values += [f"it draws from {label}, whose numbers a graph would keep"
                   for label, g, before in self._generators.values() if _state_changed(_generator_state(g), before)]
        held = [f"it returns a {type(o).__name__} holding tensors the graph computed (return them in "
                f"tuples, lists or dicts)" for o in _objects(out) if _holds_tracer(o)]
        notes = self.notes + hooks + changed + values + held
        if notes or not stored:
            self.stores.clear()
        else:   # the capture's own stores are put back: its first call stores, as later ones
            for _, v, before, _, _ in self._watched.values():
                if id(v) in stored:
                    _put_back(v, before)
        return notes

    def restore(self) -> None:
        """Put back what the capture changed (attributes, then container contents)."""
        for obj, name, before in self._writes.values():
            if before is _MISSING:
                obj.__dict__.pop(name, None)
            else:
                object.__setattr__(obj, name, before)
        for _, v, before, _, _ in self._watched.values():
            if _changed(v, before):
                _put_back(v, before)
        self._writes.clear()
        for setter, state in self._rng.values():   # the eager rerun draws what it would have
            setter(state)
        self._rng.clear()
        for _, g, before in self._generators.values():
            g.set_state(before) if isinstance(g, np.random.RandomState) else setattr(g.bit_generator, "state", before)
        self._generators.clear()

    def random_drawn(self, modname: str) -> None:
        """A `_WATCHED` random function of `modname` is about to run: keep its generator's
        state from before the capture's first draw, for `restore`."""
        get_set = _RNG_STATE.get(modname)
        if get_set is not None and modname not in self._rng:
            mod = sys.modules[modname]
            self._rng[modname] = (getattr(mod, get_set[1]), getattr(mod, get_set[0])())


class ArgumentLeaf:
    """The argument leaf `j` a changed list or dict holds (`EffectLog.argument_writes`)."""
    __slots__ = ("j",)

    def __init__(self, j: int) -> None:
        self.j = j


def passed_in_place(vals: Any, tvals: list, undo: contextlib.ExitStack) -> list:
    """`tvals` (the capture's per-parameter values, built from tracers) with each list and
    dict in it put into the caller's own container in `vals`, whose contents `undo` puts
    back: a hook or global naming a container passed in sees what the function does."""
    if vals is None:
        return tvals
    seen: dict = {}

    def fill(old, new):
        if type(old) is not type(new) or type(old) not in (list, dict) or len(old) != len(new):
            return new
        if id(old) not in seen:
            seen[id(old)] = (old, type(old)(old))
            items = [(k, fill(o, n)) for (k, o), n in zip(
                old.items() if type(old) is dict else enumerate(old), new.values() if type(new) is dict else new)]
            old.clear()
            old.update(items) if type(old) is dict else old.extend(v for _, v in items)
        return old
    out = [fill(o, n) for o, n in zip(vals, tvals)]
    undo.callback(lambda: [_put_back(o, before) for o, before in reversed(seen.values())])
    return out


def _container_ids(v: Any, ids: set = None) -> set:
    """The ids of the lists and dicts in `v` (a tree of tuples, lists and dicts)."""
    ids = set() if ids is None else ids
    if type(v) in (list, tuple, dict) and id(v) not in ids:
        ids.add(id(v))
        for x in v.values() if type(v) is dict else v:
            _container_ids(x, ids)
    return ids


def _changed_tree(v: Any, leaves: list, spec: Any) -> bool:
    now, now_spec = flatten(v)
    return now_spec != spec or any(a is not b for a, b in zip(now, leaves))


def _objects(out: Any):
    """The plain objects among a function's results (what the graph's outputs cannot hold:
    not in tuples, lists, dicts, dict subclasses or dataclasses, see pytree.py)."""
    return [o for o in flatten(out, objects=True)[0] if plain_object(o, library=True)]


def _holds_tracer(obj: Any) -> bool:
    """Whether `obj`'s attributes (or the lists, tuples and dicts in them) hold a tracer."""
    from .tracer import Tracer
    for v in vars(obj).values():
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else (v,)
        if any(isinstance(t, Tracer) for t in items):
            return True
    return False


def _put_back(v, before) -> None:
    v.clear()
    v.update(before) if not isinstance(v, list) else v.extend(before)


def _traced_stores(now, before, cache: bool = False):
    """[(key, or None for an append, tracer)] when `now` is `before` with only traced
    tensors of the capture set or appended (a list) or set under names (a dict with str
    keys: a key the capture computed from a number would be fixed); None otherwise. A
    `cache` (a module's container, which its guard compares: one written on every call
    would capture again on every call) may only have entries filled for the first time,
    None or an empty tensor before (YOLOv5's grids)."""
    from .tracer import Tracer
    if isinstance(now, list):
        if len(now) < len(before) or cache and len(now) != len(before):
            return None
        new = [(i, t) for i, (a, t) in enumerate(zip(before, now)) if a is not t]
        new += [(None, t) for t in now[len(before):]]
    elif isinstance(now, dict) and all(k in now for k in before) and not (cache and len(now) != len(before)):
        new = [(k, t) for k, t in now.items() if k not in before or t is not before[k]]
        if not all(isinstance(k, str) for k, _ in new):
            return None
    else:
        return None
    if cache and not all(before[k] is None or isinstance(before[k], Tensor) and before[k].numel() == 0
                         for k, _ in new):
        return None
    return new if all(isinstance(t, Tracer) and t._trace.parent is None for _, t in new) else None


def _named_values(fn: Callable):
    """(label, value, find) of each global and closure variable `fn`'s own code names;
    `find` reads the name again (the object a later call means)."""
    code, gl = fn.__code__, fn.__globals__
    for n in global_names(code):
        if n in gl:
            yield f"global {n!r}", gl[n], lambda gl=gl, n=n: gl[n]
    for n, c in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            yield f"closure variable {n!r}", c.cell_contents, lambda c=c: c.cell_contents
        except ValueError:   # an empty cell
            pass


_GENERATORS = (np.random.Generator, np.random.RandomState)


def _generator_state(g) -> dict:
    """A numpy generator's state (a RandomState's holds its cached Gaussian too)."""
    return g.get_state(legacy=False) if isinstance(g, np.random.RandomState) else g.bit_generator.state


def _state_changed(now: dict, before: dict) -> bool:
    """Whether a bit generator's state dict (numbers, dicts, MT19937's key array) changed."""
    if now.keys() != before.keys():
        return True
    return any(_state_changed(a, b) if isinstance(a, dict) else not np.array_equal(a, b)
               for a, b in ((now[k], before[k]) for k in now))


def _only_stores(fn, ids: set) -> bool:
    """Whether hook `fn` names, as globals or closure variables, an object in `ids` (the
    containers it stored into) and otherwise only modules, functions, classes and strings:
    a number it reads (``if STEP % 10 == 0``) could decide differently at a later call,
    which the capture does not guard, so such a hook still runs eagerly."""
    if getattr(fn, "__code__", None) is None or getattr(fn, "__globals__", None) is None:
        return False
    values = [v for _, v, _ in _named_values(fn)]
    return any(id(v) in ids for v in values) and all(
        id(v) in ids or isinstance(v, (str, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType))
        for v in values)


def _changed(now, before) -> bool:
    if len(now) != len(before):
        return True
    if isinstance(now, list):
        return any(a is not b for a, b in zip(now, before))
    if isinstance(now, dict):
        return any(k not in before or now[k] is not before[k] for k in now)
    return now != before


# Calls a capture runs once whose effect or value compiled calls would not repeat:
# ``print`` ("print": it printed once) and the Python and numpy random and clock functions
# ("value": the graph keeps the number it returned). Wrapped in their modules only while
# some capture runs; a call bound before (``from random import random``) is not seen.
_WATCHED = [("builtins", ("print",), "print"),
            ("random", ("random", "uniform", "randint", "randrange", "choice", "choices", "gauss",
                        "normalvariate", "shuffle", "sample", "betavariate", "expovariate",
                        "triangular", "getrandbits"), "value"),
            ("time", ("time", "time_ns", "perf_counter", "monotonic"), "value"),
            ("numpy.random", ("rand", "randn", "random", "randint", "uniform", "normal", "choice",
                              "permutation", "shuffle", "random_sample", "binomial", "poisson"), "value")]
_RNG_STATE = {"random": ("getstate", "setstate"), "numpy.random": ("get_state", "set_state")}
_lock = threading.Lock()
_users = [0]              # captures running now (all threads): the wrappers are in place while > 0
_originals: list = []     # (module, name, original, wrapper) while in place
# (module name, name) -> (original, its wrapper): made once, reused by every capture (making
# them and asking each function whether it is one cost ~50 us a capture)
_made: dict = {}


def _noting(label: str, kind: str, fn: Callable) -> Callable:
    def call(*args, **kwargs):
        from ..errors import _OURS
        from ..ops.eager import trace_state
        ctx = trace_state.tracer
        caller = sys._getframe(1)
        # (this thread is capturing, and the call is the user's code, not tracejit's own)
        if ctx is not None and not caller.f_code.co_filename.startswith(_OURS):
            root = ctx._root()
            where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
            seen = root.effects.prints if kind == "print" else root.effects.values
            note = where if kind == "print" else f"{label}() at {where}"
            if note not in seen:
                seen.append(note)
            if kind == "value":
                root.effects.random_drawn(label.rpartition(".")[0])
        return fn(*args, **kwargs)
    call._tracejit_wrapper = True
    return call


@contextlib.contextmanager
def printing_noted():
    """Within: the `_WATCHED` calls a capture on this thread makes are noted in its root
    context's ``effects`` (``prints``, ``values``); they still run."""
    import importlib
    with _lock:
        _users[0] += 1
        if _users[0] == 1:
            for modname, names, kind in _WATCHED:
                mod = sys.modules.get(modname) or importlib.import_module(modname)
                for name in names:
                    fn = getattr(mod, name, None)
                    made = _made.get((modname, name))
                    if made is None or made[0] is not fn:
                        if fn is None or getattr(fn, "_tracejit_wrapper", False):
                            continue
                        label = f"{modname}.{name}" if modname != "builtins" else name
                        made = _made[(modname, name)] = (fn, _noting(label, kind, fn))
                    setattr(mod, name, made[1])
                    _originals.append((mod, name, fn, made[1]))
    try:
        yield
    finally:
        with _lock:
            _users[0] -= 1
            if _users[0] == 0:
                for mod, name, fn, wrapper in _originals:
                    if getattr(mod, name, None) is wrapper:
                        setattr(mod, name, fn)
                _originals.clear()


def refuse_traced_grad_change(t: Any, value: bool) -> None:
    """Called by Tensor's ``requires_grad`` setter for a tracer whose flag would change to
    `value`. On an argument of the function being captured it changes the caller's tensor,
    which a replay of the graph would not repeat: that refuses the capture (a graph break:
    the function runs eagerly). A tensor made inside the function becomes a leaf of the
    capture (``x.detach().requires_grad_()`` before an ``autograd.grad``, torch.func's
    transforms): the gradients taken from it are recorded, and `refuse_local_leaf_outputs`
    refuses the capture if one of its outputs still depends on it."""
    trace = getattr(t, "_trace", None)
    if trace is None:
        return
    if trace.parent is None and any(v is t._var for v in trace.inputs):
        raise TraceError("requires_grad_() on an argument of a compiled function changes the "
                         "caller's tensor, which a compiled call would not; set it before the call")
    if value and trace.parent is not None:
        raise TraceError("requires_grad on a tensor made inside a branch or loop body of a compiled "
                         "function is not supported; set it before the branch or loop")
    if value:   # (among grad_inputs: values computed from it require grad, as eagerly)
        trace.__dict__.setdefault("local_leaves", []).append(t._var)
        trace.grad_inputs.append(t._var)


def refuse_local_leaf_outputs(trace: Any, out_atoms: list) -> None:
    """Refuse a capture with an output (or state write) whose gradient graph reaches only
    tensors made inside it that require grad: eagerly it requires grad (a returned leaf
    gets a .grad), which a compiled graph's output does not record. One that also depends
    on the inputs or weights requiring grad keeps its graph to those. Under a no_grad
    capture, refuse one that requires grad by values computed with grad mode turned on."""
    leaves, on = trace.__dict__.get("local_leaves"), trace.__dict__.get("grad_on")
    if not leaves and not on:
        return
    from types import SimpleNamespace
    from .tracer import active_vars

    def active(roots, eqns=trace.eqns):
        return active_vars(SimpleNamespace(inputs=roots, eqns=eqns), [True] * len(roots))
    grads = [trace.consts[id(t)] for t in trace.const_tensors if t.requires_grad]
    if on and any(a in active(trace.grad_inputs + grads, [e for e in trace.eqns if any(o in on for o in e.outs)])
                  for a in out_atoms):
        raise TraceError(_RECORDING_OFF.format("an output"))
    if not leaves:
        return
    local = active(leaves)
    real = active([v for v in trace.grad_inputs if v not in leaves] + grads)
    if any(a in local and a not in real for a in out_atoms):
        raise TraceError("requires_grad on a tensor made inside a compiled function starts a "
                         "gradient graph reaching its outputs, which the compiled graph does not "
                         "record; pass the tensor in as an argument that requires grad")


def writes_argument(t: Any) -> bool:
    """Whether tracer `t`, which requires grad and has no ``grad_fn``, is an argument of the
    function being captured that is not a leaf in this call (``x = w * 2; f(x)``): an
    in-place write into it is then allowed, as eagerly. Noted in the capture's
    ``grad_writes``, so a call with a leaf there raises at run time (entry.py)."""
    trace = getattr(t, "_trace", None)
    root = trace._root() if trace is not None else None
    if trace is not root or root is None:
        return False
    from .view_writes import argument_index
    k = argument_index(root, t)
    if k is None or root.leaves is None or root.leaves[k].grad_fn is None:
        return False
    root.__dict__.setdefault("grad_writes", set()).add(k)
    return True


_eager.trace_hooks.refuse_grad_change = staticmethod(refuse_traced_grad_change)
_eager.trace_hooks.writes_argument = staticmethod(writes_argument)


def refuse_recording_off(trace, var, prim) -> None:
    """Note `var`, computed with grad mode turned on inside a function captured under
    no_grad (``with enable_grad():``): eagerly it may take a gradient, which the capture
    does not record, so `refuse_local_leaf_outputs` refuses a capture with an output or
    state write that would require grad (the call runs eagerly); values used only inside
    (an ``autograd.grad`` recorded into the graph, torch.func's transforms) capture. Inside
    a branch or loop body it refuses at once. Under inference_mode nothing records, as
    PyTorch's inference tensors."""
    if _grad_state.inference:
        return
    if trace.parent is None:
        trace.__dict__.setdefault("grad_on", set()).add(var)
    elif trace._reaches_grad([var]):
        raise TraceError(_RECORDING_OFF.format(prim.name))


_RECORDING_OFF = ("{}: grad mode enabled inside a compiled function called under no_grad: the capture "
                  "records no gradients, so the function runs eagerly")
