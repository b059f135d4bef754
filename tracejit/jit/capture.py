"""Capturing a call into an `Entry`: the half of `CompiledFunction` that runs on a miss.

`Capture` is a base class of `CompiledFunction` (function.py), holding its capture methods:
describe the call's leaves (tensors, runtime scalars, specialized constants), decide which
dims and ints are dynamic, trace the function on tracers (retrying with static dims where user
code needs sizes as Python values), optimize, verify, guard, and ask the backend for an executor."""
from __future__ import annotations

import collections.abc
import contextlib
import functools
import gc
import os
import warnings

from .. import dtypes as _dt
from ..device import CPU
from ..autograd import grad_mode as _gm
from ..errors import ScriptError, TraceError, _PKG_DIR, user_stacklevel
from ..ops import autocast as _autocast
from ..ops.registry import Aval
from ..shapes import Sym
from ..tensor import Tensor
from . import config, view_writes as _views
from .backend import Executor, executor_for
from .dynamic_dims import _LEARNED, DynamicDims
from .entry import Entry
from .guards import LeafDesc, build_guard, describe_difference, limit_message
from .ir import Graph, verify
from .passes import optimize
from .pytree import flatten, unflatten
from .scalars import describe_decisions, make_check
from .lifted import changed_numbers, lifting, refs_of
from .numpy_args import ArrayArg, NumpyOnArray, array_dtype, arrays_to_constants, changed_array
from .side_effects import passed_in_place, printing_noted, refuse_local_leaf_outputs
from .size_args import for_capture as _size_args, specialize_sizes as _specialize_sizes
from .symbolic_len import symbolic_len
from .value_snapshot import with_tensor_reads
from .script import NoSource, convert
from .tracer import TraceContext, Tracer

__all__ = ["Capture"]
_F64 = _dt.float64.np.type   # numpy's float64 (a float subclass): a float argument too


class Capture(DynamicDims):
    """Capture methods of `CompiledFunction` (they use its state: ``_entries``, ``_dynamic``,
    ``_static``, ``_stats``, ``_lock``...)."""

    def _describe(self, leaves, names):
        descs = []
        for i, (x, name) in enumerate(zip(leaves, names)):
            if isinstance(x, Tensor):
                if isinstance(x, Tracer):
                    raise TraceError(f"argument {name!r} is a tensor being traced by an enclosing "
                                     f"compiled function; nested compilation is not supported")
                shape = tuple(x._data.shape)
                descs.append(LeafDesc("tensor", name, x.dtype, x.device, x.requires_grad, shape))
            elif self._array_inputs and name not in self._const_arrays and (dt := array_dtype(x)) is not None:
                descs.append(LeafDesc("tensor", name, dt, CPU, False, x.shape, value=x.dtype))
            elif _runtime_scalar(x, self._mode) or (type(x) is int and name in self._dynamic_ints):
                descs.append(LeafDesc("scalar", name, value=float if type(x) is _F64 else type(x)))
            elif isinstance(x, (bool, int, float, str, type(None), bytes, _dt.DType)) or type(x).__name__ == "device":
                descs.append(LeafDesc("const", name, value=x))
            elif self._mode == "script":
                raise ScriptError(f"{self.__name__}: argument {name!r} has type {type(x).__name__}, which "
                                  f"@script cannot take: pass tensors, numbers, strings, None, or "
                                  f"tuples/lists/dicts of them")
            else:
                descs.append(LeafDesc("const", name, value=x))
        return descs

    def _leaf_names(self, args, spec):
        names = []

        def walk(x, s, path):
            if s is None:
                names.append(path)
                return
            keys, subs = (s[1], s[2]) if s[0] is dict else (range(len(s[1])), s[1])
            for k, sub in zip(keys, subs):
                walk(x[k], sub, f"{path}[{k!r}]")
        for i, (a, s) in enumerate(zip(args, spec[1])):
            walk(a, s, self._names[i] if i < len(self._names) else f"arg{i}")
        return names

    def _capture_for(self, args, leaves, spec, gm):
        """Capture and cache an entry for this call (under the lock): (entry, the dynamic-dim
        state to restore if its first run fails), or (None, None) past the recompile limit."""
        names = self._leaf_names(args, spec)
        if self._force_dynamic:   # (torch.compile(dynamic=True)'s SymInts; 0 and 1 specialized)
            self._dynamic_ints |= {n for x, n in zip(leaves, names) if type(x) is int and x > 1} - self._static_ints
        descs = self._describe(leaves, names)
        reasons = self._recompile_reasons(descs, spec, gm, leaves)
        if config.stance_declines(self, reasons):   # (torch.compiler.set_stance)
            return None, None
        changed = None if self._fullgraph else changed_array(descs, self._entries, self._numpy_read)
        if changed is not None:
            self._break_to_eager(changed, args)
            return None, None
        self._stats["misses"] += 1
        if self._stats["compiles"] >= self._limit:
            self._note_reasons(reasons)
            if not self._fell_back:
                self._fell_back = True
                self._stats["eager_fallbacks"] += 1
                msg = limit_message(self.__name__, self._fn, self._limit, self._stats["recompile_reasons"])
                self._stats["fallback_reason"] = msg
                # One warning, at the user's calling line; the recompiles topic logs it too
                warnings.warn(msg, RuntimeWarning, stacklevel=user_stacklevel())
                config.topic("recompiles").info(msg)
            return None, None
        saved = (set(self._dynamic), dict(self._static), self._force_dynamic)
        if not self._stats["compiles"] and self._dynamic_ok:   # (what other instances learned: `_LEARNED`)
            self._dynamic |= _LEARNED.get(self._fn, set()) - set(self._static)
        if self._entries:
            self._mark_dynamic(descs, spec)
            self._ints_that_changed(descs, leaves)
            if self._dynamic_ok:   # numbers read from Python state that changed: runtime inputs
                for e in self._entries:
                    self._lifted_numbers |= changed_numbers(e.extra) - self._static_numbers
        try:
            with _objects_aged():
                entry = self._capture(leaves, spec, descs, gm, args)
        except BaseException as exc:
            # Nothing is kept from a capture that failed.
            self._dynamic, self._static, self._force_dynamic = saved
            if isinstance(exc, Exception) and arrays_to_constants(self, descs, exc):
                self._stats["misses"] -= 1
                return self._capture_for(args, leaves, spec, gm)
            ints = {d.name for d in descs if d.kind == "scalar" and d.name in self._dynamic_ints}
            lifted = self._lifted_numbers - self._static_numbers
            if (ints or lifted) and isinstance(exc, Exception):
                # The code needs those ints as Python ints (a shape, a dim), or the lifted
                # numbers as Python numbers: specialize them for good, as before they changed, and
                # capture again.
                self._dynamic_ints -= ints
                self._static_ints |= ints
                self._static_numbers |= lifted
                self._stats["misses"] -= 1
                return self._capture_for(args, leaves, spec, gm)
            if isinstance(exc, TraceError) and not self._fullgraph:
                self._break_to_eager(exc, args)
                return None, None
            raise
        self._note_reasons(reasons)
        entry.arg_spec = spec
        self._entries.append(entry)
        if spec == (list, (None,) * len(spec[1])):
            self._flat_entries.append(entry)
        self._stats["compiles"] += 1
        return entry, saved

    def _break_to_eager(self, exc: TraceError, args=()) -> None:
        """torch.compile's ``fullgraph=False``: a function that cannot be captured as one
        graph runs eagerly from now on (entries already captured keep serving their calls),
        with one warning that says why, instead of failing the program."""
        self._fell_back = True
        self._stats["eager_fallbacks"] += 1
        self._stats["capture_failures"] = self._stats.get("capture_failures", 0) + 1
        subs = ""
        from ..nn.module import Module
        if isinstance(self._bound_self, Module) and self._bound_self._modules:
            # as torch.compile compiles around a break: the submodules it calls, each alone
            from .submodules import SubmoduleForwards
            self._split = SubmoduleForwards(self._bound_self, self._mode, self._options)
            subs = " (the submodules it calls run compiled, each on its own)"
        elif self._bound_self is None:
            # a whole step (forward, backward, optimizer) in one function: the modules it
            # names still run compiled, as torch.compile compiles around its breaks
            from .submodules import SubmoduleForwards
            self._split = SubmoduleForwards.reached_by(self._fn, self._mode, self._options)
            passed = [a for v in args for a in (v.values() if isinstance(v, dict) else (v,))]
            if self._split.names_modules() or any(isinstance(a, Module) for a in passed):
                subs = " (the modules it calls run compiled, each on its own)"
        msg = (f"tracejit.compile: {self.__name__} cannot be captured as one graph, so it runs "
               f"eagerly from now on{subs}: {exc} (pass fullgraph=True to raise this instead)")
        self._stats["fallback_reason"] = msg
        if not self._quiet_break:
            warnings.warn(msg, RuntimeWarning, stacklevel=user_stacklevel())
        config.topic("recompiles").info(msg)

    def _note_reasons(self, reasons):
        if reasons:
            self._stats["recompile_reasons"].extend(reasons)
            config.topic("recompiles").info("recompiling %s: %s", self.__name__, "; ".join(reasons))

    def _recompile_reasons(self, descs, spec, gm, leaves=None) -> list:
        """Why no entry matched: the differences from the closest entry: one whose guards on
        the arguments all hold but for values its code specialized (an entry symbolic in an
        int argument but for a size it needed), else the one with the fewest reasons."""
        best, best_score = None, None
        same = [e for e in self._entries if e.arg_spec == spec]   # (closer than any other)
        for e in same or self._entries:
            if e.arg_spec != spec:
                reasons = ["the structure of the arguments changed (nesting of tuples/lists/dicts)"]
                score = 1
            else:
                reasons = describe_difference(e.descs, descs, e.grad_mode, gm, self._static)
                if e.autocast is not _autocast.current():
                    reasons.append("autocast changed: {} -> {}".format(*(getattr(d, "name", "off") for d in (
                        e.autocast, _autocast.current()))))
                extra = getattr(e, "extra", None)
                if extra is not None and not extra():
                    describe = getattr(extra, "describe", None)
                    reasons += describe() if describe is not None else ["a custom guard failed"]
                # A captured tensor (parameter, closure) changed dtype/shape/requires_grad.
                reasons += describe_difference(e.const_descs, _const_descs(e.const_tensors), gm, gm)
                score = len(reasons)
                if e.decisions and leaves is not None and not reasons:
                    reasons += describe_decisions(e.decisions, leaves, [d.name for d in e.descs])
                    score = 0
            if best is None or score <= best_score:
                best, best_score = reasons, score
        return best or []

    def _get_trace_fn(self):
        if self._trace_fn is None:
            if self._mode == "script":
                try:
                    self._trace_fn = convert(self._fn)
                except NoSource as e:
                    # Nothing to convert: tracing gives the same program, and control flow
                    # on tensor values still raises a TraceError naming its line.
                    config.topic("graphs").info("%s: %s; traced as it is", self.__name__, e)
                    self._trace_fn = self._fn
            else:
                self._trace_fn = self._fn
        return self._trace_fn

    def _trace(self, leaves, spec, sdescs, gm, const_names=None, vals=None, low: bool = True):
        """Run the function on tracers for `sdescs`; returns (ctx, out_atoms, out_leaves,
        out_spec, mutations)."""
        fn = self._get_trace_fn()
        ctx = TraceContext()
        ctx.capture_grad = gm
        ctx.arrays = {}   # id(ArrayArg) -> (leaf name, numpy dtype)
        ctx.leaves = list(leaves)  # Python decisions on runtime scalars read their values here
        if const_names is not None:
            ctx.const_names = const_names
        syms = {}

        def dim(s, actual):   # (a dynamic dim's name: its Sym, one per name)
            if isinstance(s, str) and s not in syms:
                syms[s] = Sym.symbol(s, int(actual))
            return syms[s] if isinstance(s, str) else s
        with ctx, _gm.set_grad_enabled(gm), contextlib.ExitStack() as undo:
            tracers = []
            orig_vars = []
            for x, d in zip(leaves, sdescs):
                if d.kind == "tensor":
                    shape = tuple(dim(s, actual) for s, actual in zip(d.shape, x.shape))
                    t = ctx.new_input(Aval(shape, d.dtype, d.device), _ident(d.name),
                                      requires_grad=d.requires_grad)
                    if d.value is not None:   # a numpy array (numpy_args.py)
                        t.__class__ = ArrayArg
                        ctx.arrays[id(t)] = (d.name, d.value)
                    orig_vars.append((len(tracers), t._var))
                    ctx.tensor_leaves[t._var] = ctx.tensor_leaves[id(t)] = len(tracers)   # (view_writes.py)
                    tracers.append(t)
                elif d.kind == "scalar":
                    dt = _dt.scalar_dtype(x)
                    t = ctx.new_input(Aval((), dt, weak=True), _ident(d.name))
                    ctx.scalar_leaves[t._var] = len(tracers)
                    tracers.append(t)
                else:
                    tracers.append(x)
            ctx.sizes = self._sizes_tried = _size_args(sdescs, self._dynamic_ints - self._fixed_size_ints, low)
            targs, tkwargs = self._unbind(tvals := passed_in_place(vals, unflatten(spec, tracers), undo))
            ctx.effects.active = getattr(self, "_side_effects", False)
            ctx.effects.watch_function(fn, leaves, tvals)
            try:
                with printing_noted(), symbolic_len(), lifting(ctx, self._lifted_numbers - self._static_numbers,
                                                               refs_of(self._extra_guard)):
                    out = fn(*self._bound, *targs, **tkwargs)
            except RecursionError as exc:
                ctx.restore_attributes()
                raise _recursion_error(self._mode, exc) from None
            except BaseException:
                ctx.restore_attributes()   # a failed capture leaves no tracer in a module
                raise
            if ctx.effects.prints:
                warnings.warn(f"{self.__name__}: print() at {', '.join(ctx.effects.prints)} ran once, while "
                              f"the function was captured; compiled calls do not run it (print outside "
                              f"the compiled function, or run this part under tracejit.eager())",
                              UserWarning, stacklevel=user_stacklevel())
            if ctx.effects.values and not ctx.effects.active:
                warnings.warn(f"{self.__name__}: {', '.join(ctx.effects.values)} ran once, while the "
                              f"function was captured; compiled calls reuse the values returned then (pass "
                              f"them in as arguments, or use tracejit's random ops)",
                              UserWarning, stacklevel=user_stacklevel())
            effects = ctx.effects.found(out := ctx.effects.argument_writes(out))
            if effects:
                ctx.restore_attributes()
                raise TraceError(f"{self.__name__} has Python side effects a graph would not repeat on "
                                 f"each call: {'; '.join(effects)}")
            out_leaves_raw, out_spec = flatten(out, objects=True)
            out_atoms, out_leaves = [], []
            for o in out_leaves_raw:
                if isinstance(o, Tracer) and o._var in ctx.lifted:   # (as read, not its float32)
                    out_leaves.append(("lifted", ctx.lifted[o._var]))
                elif isinstance(o, Tensor) and (arg := _views.returned_argument(ctx, o)) is not None:
                    out_leaves.append(arg)
                elif isinstance(o, Tensor):
                    at = ctx.atom(o)
                    number = isinstance(o, Tracer) and at.aval.weak and at.aval.shape == ()
                    out_leaves.append(("number" if number else "graph", len(out_atoms)))
                    out_atoms.append(at)
                else:
                    if type(o).__name__ == "Unbound":   # returned, but bound on one path only
                        raise o.error(" and returned from the function")
                    _specialize_sizes(o)   # a returned size is the call's, not the capture's
                    out_leaves.append(("static", o))
            mutations = []
            for i, v0 in orig_vars:
                if tracers[i]._var is not v0:  # an in-place op rebound this input
                    if sdescs[i].value is not None:
                        ctx.restore_attributes()
                        raise TraceError(f"{sdescs[i].name!r}: a write into a numpy array argument")
                    mutations.append((i, len(out_atoms), i in ctx.__dict__.get("grad_writes", ())))
                    out_atoms.append(tracers[i]._var)
            ctx.state_writes = ctx.finish_state_writes(out_atoms)
            refuse_local_leaf_outputs(ctx, out_atoms)   # (state writes among them)
        return ctx, out_atoms, out_leaves, out_spec, mutations

    def recapture(self, entry: Entry, leaves: list) -> tuple:
        """Trace again what `entry` captured, for these argument leaves: (optimized graph,
        captured tensors). Check mode compares it with the entry's graph."""
        ctx, out_atoms, *_ = self._trace(leaves, entry.arg_spec, entry.descs, entry.grad_mode,
                                         self._const_names())
        return optimize(ctx.graph(out_atoms, name=self.__name__), apart=True), ctx.const_tensors

    def _capture(self, leaves, spec, descs, gm, vals=None):
        """Trace the function for these leaves and build the entry that replays it."""
        for d in descs:   # (a generator, iter(list), zip(...): the items of one call would be kept)
            if d.kind == "const" and isinstance(d.value, collections.abc.Iterator):
                raise TraceError(f"argument {d.name!r} is an iterator ({type(d.value).__name__}): a capture would "
                                 f"keep what it gave once, for every later call; pass its items instead")
        allow_symbols = True
        refused: set = set()   # dims a symbolic attempt could not trace: static from now on
        failed = "a capture with it symbolic failed"
        symbolic: list = []
        low = True   # quotients of 0 or 1 as sizes from 0 up (size_args.py), until one broadcasts
        self._sizes_tried = None
        for attempt in range(5):
            if attempt == 4 and allow_symbols:
                # the last try is fully static: nothing left to specialize
                allow_symbols = False
                refused.update(symbolic)
            sdescs = self._symbolic_descs(descs, allow_symbols, spec)
            symbolic = [(d.name, j) for d in sdescs if d.kind == "tensor"
                        for j, s in enumerate(d.shape) if isinstance(s, str)]
            # a module's guard notes the attributes the forward reads (module_guard.py);
            # so does a capture with modules among its arguments
            modules = _module_arguments(sdescs)
            rec = getattr(self._extra_guard, "recording", None)
            if modules:
                from .module_guard import recording
                rec = recording if rec is None else functools.partial(rec, modules=True)
            try:
                with rec() if rec is not None else contextlib.nullcontext() as read:
                    ctx, out_atoms, out_leaves, out_spec, mutations = self._trace(
                        leaves, spec, sdescs, gm, self._const_names(), vals, low)
            except Exception as exc:
                if not symbolic or isinstance(exc, NumpyOnArray):
                    raise
                if low and getattr(self._sizes_tried, "from_zero", False):   # (one of 1 broadcast: this call's constant)
                    low = False
                    continue
                # Shape logic that symbolic dims cannot express: capture with static shapes
                # (if that fails too, its error is the user's).
                config.topic("recompiles").info("%s: capture with dims %s symbolic failed (%s: %s); "
                                                "capturing them static", self.__name__, sorted(symbolic),
                                                type(exc).__name__, exc)
                refused.update(symbolic)
                allow_symbols, failed = False, f"{failed} ({type(exc).__name__}: {exc})"
                continue
            if ctx.specialized and low and ctx.sizes.from_zero:
                low = False
                continue
            if ctx.specialized:
                # User code needed concrete sizes: keep those dims static from now on (one grown
                # from 1, broadcast against a static one: for this capture only) and capture again.
                self._fixed_size_ints |= ctx.sizes.leaf_names(ctx.specialized, sdescs)
                self._static_numbers |= ctx.sizes.lifted_keys(ctx.specialized)
                spec_dims = {(d.name, j): f"its value was needed{ctx.specialized[s]}" for d in sdescs
                             if d.kind == "tensor" for j, s in enumerate(d.shape) if s in ctx.specialized}
                self._static.update({d: why for d, why in spec_dims.items() if d not in self._grown})
                for dims in (self._dynamic, self._grown):
                    dims.difference_update(spec_dims)
                config.topic("recompiles").info("%s: dims are used as Python values; keeping them static: %s",
                                                self.__name__, spec_dims)
                continue
            break
        if refused:
            self._static.update(dict.fromkeys(refused, failed))
            self._dynamic -= refused
        graph = ctx.graph(out_atoms, name=self.__name__)
        opt = optimize(graph, apart=True)
        const_descs = _const_descs(ctx.const_tensors, self._const_names())
        consts = list(ctx.const_tensors)
        lifted = frozenset(x.key for x in ctx.lifted.values())   # (guarded by type only)
        extra = self._extra_guard
        if extra is not None and hasattr(extra, "snapshot"):
            # the state this capture saw, checked on every call
            extra = extra.snapshot(consts, ctx.state_writes, read, lifted)
        if modules:
            from .module_guard import with_module_arguments
            extra = with_module_arguments(extra, modules, consts, ctx.state_writes, read, lifted)
        extra = with_tensor_reads(extra, ctx)
        decisions = list(ctx.decisions)
        autocast = _autocast.current()
        default_dtype = _dt.get_default_dtype()
        guard, src = build_guard(sdescs, const_descs, gm, extra,
                                 decisions=make_check(decisions) if decisions else None,
                                 compiled=False, autocast=autocast, default_dtype=default_dtype)   # (compiled at its first call: Entry)
        if decisions:
            names = [d.name for d in sdescs]
            src += "".join(f"# and {d.text(names)}\n" for d in decisions)
        config.topic("graphs").info("captured %s:\n%s", self.__name__, opt)
        config.topic("guards").info("guard for %s:\n%s", self.__name__, src)
        executor = self._make_executor(opt, gm, _verifier(graph, opt))
        entry = Entry(sdescs, consts, const_descs, gm, graph, opt, out_spec,
                      out_leaves, mutations, guard, src, executor, extra, decisions, ctx.state_writes,
                      autocast=autocast, default_dtype=default_dtype, lifted=list(ctx.lifted.values()))
        executor.attach(entry)  # a background compile replaces the entry's executor later
        return entry

    def _const_names(self):
        """Names for captured tensors: a module's parameter and buffer names."""
        names = self._tensor_names
        return names() if names is not None else None

    def _make_executor(self, graph: Graph, gm: bool, check) -> Executor:
        return executor_for(self._compiler, graph, grad_mode=gm, name=self.__name__,
                            compile_mode=self._compile_mode, lock=self._lock, owner=self, check=check)


def _verifier(graph: Graph, opt: Graph):
    """The entry's verification: the traced graph, then the optimized one (`verify`), at
    most once. The backend calls it before it builds anything from `opt`; a background
    entry's tier 0 runs before it (backend.Compiler.executor)."""
    done = []

    def check() -> None:
        if not done:
            verify(graph)
            verify(opt)
            done.append(True)
    return check


@contextlib.contextmanager
def _objects_aged():
    """The capture with the objects that existed before it set aside from the collector
    (`gc.freeze`), then put back in the oldest generation (`gc.unfreeze`): a capture
    allocates thousands of long-lived objects, and each young collection in it would also
    walk the program's young objects (the model, the data: 0.7-0.8 ms in the CNN's first
    capture). A garbage cycle among them is freed by the next full collection. Skipped when
    the program froze objects itself or turned the collector off."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _recursion_error(mode: str, exc: RecursionError) -> Exception:
    """A function that calls itself while being captured: name it and the line."""
    counts: collections.Counter = collections.Counter()
    lines = {}
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith((_PKG_DIR, "<tracejit")):   # our frames are not the culprit
            tb = tb.tb_next
            continue
        counts[code] += 1
        lines.setdefault(code, tb.tb_lineno)
        tb = tb.tb_next
    code, _ = counts.most_common(1)[0] if counts else (None, 0)
    who = (f"`{code.co_name}` ({os.path.basename(code.co_filename)}:{lines[code]}) calls itself"
           if code is not None else "the function recurses")
    msg = (f"@{mode}: recursion cannot be compiled: {who} without end while being captured, "
           f"because its stopping condition depends on a value only known at run time (a tensor "
           f"or a runtime scalar argument). Write it as a loop (`for`/`while`), or run it eagerly.")
    return (ScriptError if mode == "script" else TraceError)(msg)


def _const_descs(tensors, names=None) -> list:
    return [LeafDesc("tensor", f"<captured {(names or {}).get(id(t)) or t._name or type(t).__name__} "
                     f"{tuple(t._data.shape)}>", t.dtype, t.device, t.requires_grad, tuple(t._data.shape))
            for t in tensors]


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")


def _runtime_scalar(x, mode: str) -> bool:
    """Is this argument leaf a runtime input of the graph (rather than specialized)?

    @trace: floats and numpy float64s (a learning rate, the previous loss) are inputs; ints and
    bools decide sizes and structure, specialized (guarded by value) until an int changes (from
    the start under dynamic=True). @script: ints and floats are inputs (its loops and branches on
    them become graph control flow); bools steer Python structure (``has_mask=True``). Code that
    needs an input's value (``if lr > 0.1``, ``x.view(n, -1)``) gets it, guarded (scalars.py).
    """
    t = type(x)
    return t is float or t is _F64 or (mode == "script" and t is int)


def _module_arguments(descs) -> list:
    """The nn.Modules among a call's specialized arguments (held by identity)."""
    found = []
    for d in descs:
        if d.kind == "const" and d.value is not None and hasattr(d.value, "named_modules") \
                and hasattr(d.value, "_parameters") and all(d.value is not m for m in found):
            found.append(d.value)
    return found
