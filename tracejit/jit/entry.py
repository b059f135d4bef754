"""`Entry`: one capture of a compiled function, and how a call runs it.

An entry holds what the capture produced: the descriptions its guard checks, the graph
(as traced and optimized), the executor that runs it (jit/backend.py), how graph outputs
map back to the function's return value, and the writes back into its arguments (in-place
updates) and into module state (buffers, attributes). Its ``hit`` is the generated guard
plus run of the hot path.
"""
from __future__ import annotations

import threading
from typing import Optional

import numpy as np

from ..nn import module as _module
from ..nn import rebinds as _rebinds
from ..tensor import Tensor
from .backend import Executor, InputKeeper
from .guards import PendingGuard, build_guard
from .module_guard import _plain, _same, map_state
from .numpy_args import as_tensors
from .pytree import unflatten
from .scalars import make_check
from .side_effects import ArgumentLeaf
from . import view_writes as _views
from .interpreter import _eval, bind_symbols, eval_params
from ..shapes import contains_sym
from .state_writes import _read_attr

__all__ = ["Entry"]

_hit_lock = threading.Lock()   # building an entry's hit function (`_first_hit`, `set_executor`)


class Entry:
    """One capture: guard + graph + how to run it."""

    def __init__(self, descs, const_tensors, const_descs, grad_mode, graph, opt_graph, out_spec,
                 out_leaves, mutations, guard, guard_src, executor, extra=None, decisions=(),
                 state_writes=(), autocast=None, default_dtype=None, lifted=()):
        self.extra = extra
        self.autocast = autocast   # the autocast dtype of the capture (None: off), guarded
        self.default_dtype = default_dtype   # get_default_dtype() at capture, guarded
        # module state the function updates: ("buffer", tensor, k) copies graph output k into
        # the tensor's memory; ("attr", obj, name, k) sets the attribute to output k;
        # ("store", find, key, k) appends output k to the list find() gives (key None) or sets it
        self.state_writes = list(state_writes)
        # the parameters whose lists and dicts the function changes: the graph's result is
        # (result, their contents), stored into the call's own by `run`
        self.arg_writes = next((w[1] for w in self.state_writes if w[0] == "args"), ())
        # an attribute set over a tensor the capture read as a constant (``self.h =
        # f(self.h)``), or over a value its guard may hold (``if self.h is None``, state
        # _writes.py's "rebind"): each call's new tensor must be what the next call reads,
        # so the module's guard looks again (module_guard.py puts it in the constant's
        # place, or captures again)
        read = {id(t) for t in const_tensors}
        self._rebinds = any(w[0] == "rebind" or w[0] == "attr" and id(_read_attr(w[1], w[2])) in read
                            for w in self.state_writes)
        # (the objects whose attributes such a call sets: `nn.rebinds.note_rebinds`)
        self._rebound = [w[1] for w in self.state_writes if w[0] == "attr"] if self._rebinds else []
        # Python decisions on runtime scalar arguments (see scalars.py), replayed by the guard
        self.decisions = list(decisions)
        self._decided = make_check(self.decisions) if self.decisions else None
        self.descs = descs
        self.const_tensors = const_tensors
        self.const_descs = const_descs
        self.grad_mode = grad_mode
        self.graph = graph
        self.opt_graph = opt_graph
        self.out_spec = out_spec
        # per output leaf: ("graph", k), ("number", k) (a Python number computed from runtime
        # scalar arguments: returned as one, like the Python code does), ("lifted", Lifted)
        # (a number read from Python state, returned as read) or ("static", value)
        self.out_leaves = out_leaves
        self.mutations = mutations      # [(leaf index, graph output index, a write with its gradient)]
        # A guard not compiled yet (capture's: `PendingGuard`) is compiled at its first
        # call, which then puts the function here itself.
        self.guard = self._first_guard if isinstance(guard, PendingGuard) else guard
        self._pending_guard = guard if isinstance(guard, PendingGuard) else None
        self.guard_src = guard_src
        self.executor = _executor(executor)
        # the executor the entry was made with: what explain and cache_stats ask about its
        # tier and kernels (a background compile's, after `set_executor` too)
        self.origin = executor
        self.hits = 0
        self.input_leaf_idx = [i for i, d in enumerate(descs) if d.kind in ("tensor", "scalar")]
        self.arrays = [i for i, d in enumerate(descs) if d.kind == "tensor" and d.value is not None]
        # floats read from Python state as runtime inputs (lifted.py): graph inputs after
        # the arguments', read at each call
        self.lifted = list(lifted)
        self._single = (out_spec is None and list(out_leaves) == [("graph", 0)] and not mutations
                        and not self.state_writes)
        self._direct = (not const_tensors and not self.lifted and not self.arrays
                        and self.input_leaf_idx == list(range(len(descs))))
        # An entry that writes to an input was captured for distinct buffers: a call whose
        # tensors share memory (``g(x, x)``, overlapping slices) must not run it.
        self.no_alias = bool(mutations)
        # The generated hit is built at the first call that checks it: the capture's own
        # call runs `run` directly, and generating and compiling it is 1-2 ms of that
        # first call (a background-mode first call is otherwise a capture + an eager call).
        self.hit = self._first_hit

    def _build_hit(self):
        """The generated ``hit(L, gm)`` of the hot path: this entry's guard, then the run.

        An inference entry with one tensor output calls its plan and wraps the result
        inline (the common case, one Python call per hit besides the plan's own); every
        other entry goes through `run`.
        """
        names = {"E": self, "C": self.const_tensors, "RUN": self.run}
        tensors = [d for d in list(self.descs) + list(self.const_descs) if d.kind == "tensor"]
        infer = not self.grad_mode or not any(d.requires_grad and d.dtype.differentiable
                                              for d in tensors)
        body = ["    E.hits += 1", "    return RUN(L)"]
        fast = self.executor.fast_inference() if infer and self._single and not self.lifted else None
        train = None
        if not infer and self._single and self._direct:
            diff_idx = tuple(i for i, d in enumerate(self.descs)
                             if d.kind == "tensor" and d.requires_grad and d.dtype.differentiable)
            train = self.executor.fast_training(diff_idx)
        if train is not None:
            names["TRAIN"] = train
            body = ["    E.hits += 1", "    return TRAIN[0](L)"]
        if fast is not None:
            plan_fn, d, dev = fast
            names.update(PLAN=plan_fn, WRAP=Tensor._wrap, OD=d, OV=dev)
            arrays = [f"L[{i}]" + ("" if i in self.arrays else "._data") for i in self.input_leaf_idx]
            arrays += [f"C[{i}]._data" for i in range(len(self.const_tensors))]
            body = ["    E.hits += 1", f"    return WRAP(PLAN({', '.join(arrays)})[0], OD, OV)"]
        if self.no_alias:  # aliased tensors: a miss here, and the slow path runs eagerly
            names["ALIASED"] = self.aliased
            body = ["    if ALIASED(L):", "        return NO"] + body
        hit, _ = build_guard(self.descs, self.const_descs, self.grad_mode, self.extra, on_pass=(body, names),
                             decisions=self._decided, autocast=self.autocast,
                             default_dtype=self.default_dtype)
        return hit

    def _first_guard(self, L, C, gm):
        """The guard before it is compiled: compile it (once), then run it."""
        guard = self.guard = self._pending_guard.function()
        return guard(L, C, gm)

    def _first_hit(self, L, gm):
        """The hit before it is generated: generate it (once), then run it."""
        with _hit_lock:  # (set_executor must not be overtaken by a hit built before it)
            hit = self.hit
            if hit == self._first_hit:
                hit = self.hit = self._build_hit()
        return hit(L, gm)

    def set_executor(self, executor: Executor) -> None:
        """Run `executor` from now on (a background compile's switch to kernels). The hit
        function is replaced in one attribute store: a caller sees the old one or the new."""
        executor = _executor(executor)
        with _hit_lock:
            self.executor = executor
            self.hit = self._build_hit()

    def rebound(self, extra, consts: list, objs: dict) -> Optional["Entry"]:
        """This capture serving another module of its class (`module_guard.sibling_check`
        gave `extra`, its tensors `consts` and `objs`, this module's objects -> its): the
        same graph and executor, or None when the capture holds state it cannot move."""
        writes = [map_state(w, objs) for w in self.state_writes]
        if self.lifted or None in writes or any(x[0] not in ("graph", "number", "static", "input")
                                                or x[0] == "static" and not _plain(x[1]) for x in self.out_leaves):
            return None
        guard, _ = build_guard(self.descs, self.const_descs, self.grad_mode, extra, decisions=self._decided,
                               compiled=False, autocast=self.autocast, default_dtype=self.default_dtype)
        e = Entry(self.descs, consts, self.const_descs, self.grad_mode, self.graph, self.opt_graph,
                  self.out_spec, self.out_leaves, self.mutations, guard, self.guard_src, self.origin, extra,
                  self.decisions, writes, autocast=self.autocast, default_dtype=self.default_dtype)
        e.arg_spec = self.arg_spec
        self.origin.attach(e)   # (a background compile switches both)
        if self.executor is not self.origin:
            e.set_executor(self.executor)
        return e

    def aliased(self, leaves) -> bool:
        """Whether two of the call's tensors (arguments, captured tensors) share memory."""
        arrays = [x._data if isinstance(x, Tensor) else x for x in leaves if isinstance(x, (Tensor, np.ndarray))]
        arrays += [t._data for t in self.const_tensors]
        return _any_overlap(arrays)

    def graph_inputs(self, leaves, consts=None) -> list:
        """The graph's inputs for a call with these argument leaves (`consts`: the captured
        tensors, the entry's by default)."""
        if self.arrays:   # numpy arguments, as tensors sharing their memory
            leaves = as_tensors(leaves, self.arrays)
        ins = [leaves[i] for i in self.input_leaf_idx]
        ins += [x.value() for x in self.lifted]
        ins += self.const_tensors if consts is None else consts
        return ins

    def run(self, leaves, args=()):
        """Run the graph on the call's argument `leaves`; `args`: its values per parameter,
        whose lists and dicts get what the function stores into them."""
        # (_direct: every leaf is a graph input, in order, and nothing was lifted)
        ins = leaves if self._direct else self.graph_inputs(leaves)
        if self._single:  # one tensor out, nothing written back
            return self.executor(ins)[0]
        outs = self.executor(ins)
        if self.mutations:
            node = next((o.grad_fn for o in outs if isinstance(o.grad_fn, InputKeeper)), None)
            if node is None:   # (an interpreted call: its nodes are eager ones)
                _keep_inputs(outs, leaves, [leaves[i] for i, _, _ in self.mutations])
            for leaf_i, k, grad_write in self.mutations:
                if node is not None:  # its backward reads the value before the write below
                    node.keep_input(leaves[leaf_i])
                leaf = leaves[leaf_i]
                if leaf._requires_grad and leaf.grad_fn is None:
                    if grad_write:   # (captured with a non-leaf there: a leaf raises, as eagerly)
                        leaf._check_inplace("in-place update of an input")
                    # a write through its detach() or .data (the capture refuses any other
                    # on a leaf that requires grad): its data only, as eagerly
                    from ..autograd.grad_mode import no_grad
                    with no_grad():
                        leaf._assign(outs[k], "in-place update of an input")
                else:
                    leaf._assign(outs[k], "in-place update of an input")
        if self.state_writes:
            _write_state(self.state_writes, outs)
            if self._rebinds:
                _rebinds.note_rebinds(self._rebound)
        res = [outs[x[1]] if x[0] == "graph" else outs[x[1]].item() if x[0] == "number"
               else x[1].value() if x[0] == "lifted" else x[1] if x[0] == "static"
               else self._view_of(leaves[x[1]] if x[0] == "input" else x[1], x[2], ins) for x in self.out_leaves]
        if not self.arg_writes:
            return unflatten(self.out_spec, res)
        res, now = unflatten(self.out_spec, [leaves[x.j] if type(x) is ArgumentLeaf else x for x in res])
        for i, value in zip(self.arg_writes, now):
            _store_into(args[i], value)
        return res

    def _view_of(self, arg, chain, ins):
        """A returned view of an argument (or buffer) written in place: its view ops on it
        (their sizes bound from this call's inputs), as eagerly it is a view of it."""
        if any(contains_sym((rest, tuple(params.values()))) for _, rest, params in chain):
            syms = bind_symbols(self.graph, ins)
            chain = [(p, _eval(rest, syms), eval_params(params, syms)) for p, rest, params in chain]
        return _views.replay(arg, chain)


def _executor(executor):
    if not isinstance(executor, Executor):
        raise TypeError(f"an entry's executor must be a tracejit.jit.backend.Executor, "
                        f"got {type(executor).__name__}")
    return executor


def _keep_inputs(outs: list, leaves: list, written: list) -> None:
    """Before a call writes into its arguments `written`: each autograd node the call made
    whose backward reads one of them (a view of it included) keeps a copy of the value it
    read. The walk stops at the arguments' own nodes."""
    stop = {id(x.grad_fn) for x in leaves if isinstance(x, Tensor) and x.grad_fn is not None}
    seen: set = set()
    todo = [o.grad_fn for o in outs if isinstance(o, Tensor) and o.grad_fn is not None]
    while todo:
        n = todo.pop()
        if n is None or id(n) in seen or id(n) in stop:
            continue
        seen.add(id(n))
        keep = getattr(n, "keep_input", None)
        if keep is not None:
            for t in written:
                keep(t)
        todo.extend(f for f, _ in getattr(n, "next_functions", ()))


def _write_state(writes: list, outs: list) -> None:
    """Write back the module state a compiled call updated (buffers in place, as eager
    does; attributes set to the new tensor). Not part of any autograd graph."""
    node = next((o.grad_fn for o in outs if isinstance(o.grad_fn, InputKeeper)), None)
    for w in writes:
        if w[0] == "buffer":
            t, new = w[1], outs[w[2]]
            if node is not None:   # its backward reads the value the forward saw
                node.keep_input(t)
            xp = np if t.device.type == "cpu" else t._xp()
            xp.copyto(t._data, new._data, casting="unsafe")
            t._vbox[0] += 1
        elif w[0] in ("number", "const"):
            _, obj, name, v = w
            v = outs[v].item() if w[0] == "number" else v
            if not _same(_read_attr(obj, name), v):
                setattr(obj, name, v)   # (as a module's setattr: its guards look again)
        elif w[0] in ("args", "rebind"):   # (`Entry.run` stores them; `Entry.run` looks again)
            continue
        elif w[0] == "tree":   # a new container of this call's outputs, with their gradient
            _, obj, name, spec, kept = w
            object.__setattr__(obj, name, unflatten(spec, [outs[v] if k == "out" else v for k, v in kept]))
        elif w[0] == "store":   # a hook's activations: kept with their gradient, as eagerly
            _, find, key, k = w
            find().append(outs[k]) if key is None else find().__setitem__(key, outs[k])
        else:
            _, obj, name, k = w
            if _is_buffer(obj, name):
                obj.__dict__["_buffers"][name] = outs[k].detach()
            else:   # (with its gradient, as eagerly: an auxiliary loss kept on the module)
                object.__setattr__(obj, name, outs[k])


def _store_into(old, new) -> None:
    """Make the caller's list, dict or tuple `old` hold what the capture's copy of it holds
    now (`new`): keys and items set, added and removed, nested lists and dicts in place."""
    if type(old) is dict:
        for k in [k for k in old if k not in new]:
            del old[k]
    elif type(old) is list:
        del old[len(new):]
        old.extend(new[len(old):])
    for k, v in (new.items() if type(new) is dict else enumerate(new)):
        o = old.get(k, _NONE) if type(old) is dict else old[k]
        if type(o) is type(v) and type(v) in (dict, list, tuple) and (type(v) is not tuple or len(o) == len(v)):
            _store_into(o, v)
        elif o is not v and type(old) is not tuple:
            old[k] = v


_NONE = object()


def _is_buffer(obj, name: str) -> bool:
    bufs = getattr(obj, "__dict__", {}).get("_buffers")
    return bufs is not None and name in bufs


def _any_overlap(arrays) -> bool:
    """Whether any two arrays may share memory: numpy arrays sorted by their byte bounds, a
    pair whose bounds overlap asked numpy's may_share_memory (an update of 200 parameters
    asked it of every pair: 20 ms a call); other array types by the buffer that owns them."""
    seen, spans = set(), []
    for a in arrays:
        key = id(a) if isinstance(a, np.ndarray) else id(root_array(a))
        if key in seen:
            return True
        seen.add(key)
        if isinstance(a, np.ndarray) and a.size:
            spans.append((*_byte_bounds(a), a))
    spans.sort(key=lambda s: s[0])
    active: list = []   # the spans seen that end past the next one's start
    for lo, hi, a in spans:
        active = [s for s in active if s[1] > lo]
        if any(np.may_share_memory(a, s[2]) for s in active):
            return True
        active.append((lo, hi, a))
    return False


_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds


def root_array(a):
    """The array that owns `a`'s memory (`a` itself when it owns it)."""
    while getattr(a, "base", None) is not None:
        a = a.base
    return a
