"""`CompiledFunction`: what ``@trace`` and ``@script`` return.

A call is matched against the cached entries by their guards; a hit runs the
entry's program, a miss captures the function again. Each entry is one traced
graph, optimized by the passes, plus its executor (the reference interpreter, or
compiled kernels once the compiler is enabled). When a call differs from an
existing entry only in some dims, those dims become symbolic for the next capture
("automatic dynamic shapes"), so a batch-size sweep costs two or three captures;
dims the code needs as Python values (``if x.shape[0] > 4``) stay static from then on.
Past ``recompile_limit`` captures, new signatures run eagerly (one warning); existing
entries keep serving the calls they match. A capture that fails leaves no trace in
the cache. A compiled function called while another is being captured is inlined.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
import warnings
from typing import Any, Callable, Optional

import numpy as np

from .. import dtypes as _dt
from ..autograd import grad_mode as _gm
from ..errors import CompileError, ScriptError, TraceError
from ..ops import registry as _reg
from ..shapes import Sym
from ..tensor import Tensor
from . import config
from .backend import Executor, InputKeeper, executor_for, raise_kernel_error
from .config import plain_call
from .guards import MISS, LeafDesc, _same_value, build_guard, describe_difference
from .ir import Graph, verify
from .passes import optimize
from .pytree import flatten, unflatten
from .scalars import describe_decisions, make_check
from .tracer import TraceContext, Tracer

__all__ = ["CompiledFunction", "Entry", "DEFAULT_RECOMPILE_LIMIT"]

DEFAULT_RECOMPILE_LIMIT = 8


class Entry:
    """One capture: guard + graph + how to run it."""

    def __init__(self, descs, const_tensors, const_descs, grad_mode, graph, opt_graph, out_spec,
                 out_leaves, mutations, guard, guard_src, executor, extra=None, decisions=(),
                 state_writes=()):
        self.extra = extra
        # module state the function updates: ("buffer", tensor, k) copies graph output k into
        # the tensor's memory; ("attr", obj, name, k) sets the attribute to output k
        self.state_writes = list(state_writes)
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
        # scalar arguments: returned as one, like the Python code does) or ("static", value)
        self.out_leaves = out_leaves
        self.mutations = mutations      # [(leaf index, graph output index)]
        self.guard = guard
        self.guard_src = guard_src
        if not isinstance(executor, Executor):
            raise TypeError(f"an entry's executor must be a tracejit.jit.backend.Executor, "
                            f"got {type(executor).__name__}")
        self.executor = executor
        self.hits = 0
        self.input_leaf_idx = [i for i, d in enumerate(descs) if d.kind in ("tensor", "scalar")]
        self._single = (out_spec is None and list(out_leaves) == [("graph", 0)] and not mutations
                        and not self.state_writes)
        self._direct = (not const_tensors and self.input_leaf_idx == list(range(len(descs))))
        # An entry that writes to an input was captured for distinct buffers: a call whose
        # tensors share memory (``g(x, x)``, overlapping slices) must not run it.
        self.no_alias = bool(mutations)
        self.hit = self._build_hit()

    def _build_hit(self):
        """The generated ``hit(L, gm)`` of the hot path: this entry's guard, then the run.

        An inference entry with one tensor output calls its plan and wraps the result
        inline (the common case, one Python call per hit besides the plan's own); every
        other entry goes through `run`.
        """
        names = {"E": self, "C": self.const_tensors, "RUN": self.run}
        tensors = [d for d in list(self.descs) + list(self.const_descs) if d.kind == "tensor"]
        infer = not self.grad_mode or not any(d.requires_grad and d.dtype.is_floating_point
                                              for d in tensors)
        body = ["    E.hits += 1", "    return RUN(L)"]
        fast = self.executor.fast_inference() if infer and self._single else None
        if fast is not None:
            plan_fn, d, dev = fast
            names.update(PLAN=plan_fn, WRAP=Tensor._wrap, OD=d, OV=dev)
            arrays = [f"L[{i}]._data" for i in self.input_leaf_idx]
            arrays += [f"C[{i}]._data" for i in range(len(self.const_tensors))]
            body = ["    E.hits += 1", f"    return WRAP(PLAN({', '.join(arrays)})[0], OD, OV)"]
        if self.no_alias:  # aliased tensors: a miss here, and the slow path runs eagerly
            names["ALIASED"] = self.aliased
            body = ["    if ALIASED(L):", "        return NO"] + body
        hit, _ = build_guard(self.descs, self.const_descs, self.grad_mode, self.extra, on_pass=(body, names),
                             decisions=self._decided)
        return hit

    def set_executor(self, executor: Executor) -> None:
        """Run `executor` from now on (a background compile's switch to kernels). The hit
        function is replaced in one attribute store: a caller sees the old one or the new."""
        if not isinstance(executor, Executor):
            raise TypeError(f"an entry's executor must be a tracejit.jit.backend.Executor, "
                            f"got {type(executor).__name__}")
        self.executor = executor
        self.hit = self._build_hit()

    def aliased(self, leaves) -> bool:
        """Whether two of the call's tensors (arguments, captured tensors) share memory."""
        arrays = [x._data for x in leaves if isinstance(x, Tensor)]
        arrays += [t._data for t in self.const_tensors]
        return _any_overlap(arrays)

    def run(self, leaves):
        if self._direct:
            ins = leaves  # every leaf is a graph input, in order, and nothing was lifted
        else:
            ins = [leaves[i] for i in self.input_leaf_idx]
            if self.const_tensors:
                ins.extend(self.const_tensors)
        if self._single:  # one tensor out, nothing written back
            return self.executor(ins)[0]
        outs = self.executor(ins)
        if self.mutations:
            node = next((o.grad_fn for o in outs if isinstance(o.grad_fn, InputKeeper)), None)
            for leaf_i, k in self.mutations:
                if node is not None:  # its backward reads the value before the write below
                    node.keep_input(leaves[leaf_i])
                leaves[leaf_i]._assign(outs[k], "in-place update of an input")
        if self.state_writes:
            _write_state(self.state_writes, outs)
        res = [outs[x[1]] if x[0] == "graph" else outs[x[1]].item() if x[0] == "number" else x[1]
               for x in self.out_leaves]
        return unflatten(self.out_spec, res)


class CompiledFunction:
    """A function compiled per input signature. Call it like the original."""

    def __init__(self, fn: Callable, *, mode: str = "trace", eager: bool = False, check: bool = False,
                 recompile_limit: int = DEFAULT_RECOMPILE_LIMIT, dynamic: Optional[bool] = None,
                 compiler: Optional[str] = None, bound_self: Any = None, extra_guard=None,
                 compile: Optional[str] = None):
        if not callable(fn):
            raise TypeError(f"tracejit.{mode} expects a function or an nn.Module, got {type(fn).__name__}")
        self._fn = fn
        self._mode = mode
        self._eager = eager
        self._check = check
        self._limit = recompile_limit
        self._dynamic_ok = dynamic is not False
        self._force_dynamic = dynamic is True
        self._compiler = compiler
        if compile not in (None, "background", "sync"):
            raise ValueError(f"compile= must be 'background' or 'sync', got {compile!r}")
        self._compile_mode = compile  # None: $TRACEJIT_COMPILE, else background (compiler/tiers.py)
        self._bound_self = bound_self
        self._extra_guard = extra_guard
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        if bound_self is not None:
            params = params[1:]
        self._names = [p.name for p in params]
        self._simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self._nparams = len(params)
        self._hot_ok = self._simple and not eager and not check
        self._trace_fn = None  # the function actually traced (script rewrites it)
        self._entries: list = []
        self._flat_entries: list = []  # entries captured from flat arguments (the hot path)
        self._dynamic: set = set()     # (leaf name, dim) made symbolic
        self._static: set = set()      # (leaf name, dim) the code needed the value of: never symbolic
        self._lock = threading.RLock()
        self._fell_back = False
        self._stats = {"compiles": 0, "hits": 0, "misses": 0, "recompile_reasons": [],
                       "eager_fallbacks": 0}
        # functools.partial and other callables have no __name__: messages still need one.
        self.__name__ = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) \
            or type(fn).__name__
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        functools.update_wrapper(self, fn)

    # ---- calling ----------------------------------------------------------------------
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _call_eager(self, args, kwargs):
        if self._bound_self is not None:
            return self._fn(self._bound_self, *args, **kwargs)
        return self._fn(*args, **kwargs)

    def _call_eager_bound(self, vals):
        """Call the Python function with the per-parameter values `_bind` produced."""
        args, kwargs = self._unbind(vals)
        return self._call_eager(args, kwargs)

    def _unbind(self, vals):
        """Per-parameter values -> (args, kwargs) to call the function with."""
        if self._simple:
            return tuple(vals), {}
        args, kwargs = [], {}
        params = list(self._sig.parameters.values())[1 if self._bound_self is not None else 0:]
        for p, v in zip(params, vals):
            if p.kind == p.VAR_POSITIONAL:
                args.extend(v)
            elif p.kind == p.VAR_KEYWORD:
                kwargs.update(v)
            elif p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = v
            else:
                args.append(v)
        return tuple(args), kwargs

    def __call__(self, *args, **kwargs):
        try:   # free when nothing is raised (Python 3.11+)
            # The hot path: positional arguments, no special mode, a guard hit.
            if not kwargs and len(args) == self._nparams and self._hot_ok \
                    and _reg.trace_state.tracer is None and plain_call():
                gm = _gm._state.enabled
                for e in self._flat_entries:
                    r = e.hit(args, gm)
                    if r is not MISS:
                        return r
            return self._call_slow(args, kwargs)
        except Exception as exc:
            raise_kernel_error(exc)
            raise

    def _call_slow(self, args, kwargs):
        if self._eager or config.is_eager():
            return self._call_eager(args, kwargs)
        if _reg.trace_state.tracer is not None:
            # Called from inside another function being captured: inline it there.
            return self._call_inline(args, kwargs)
        if kwargs or not self._simple or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        # The hot path: flat arguments checked by generated guards.
        for e in self._flat_entries:
            if e.guard(args, e.const_tensors, gm):
                if e.no_alias and e.aliased(args):
                    return self._call_aliased(args)
                e.hits += 1
                if self._check or config.check_enabled():
                    return self._checked(e, list(args), args)
                return e.run(args)
        leaves, spec = flatten(list(args))
        if spec != (list, tuple([None] * len(args))):
            for e in self._entries:
                if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm):
                    if e.no_alias and e.aliased(leaves):
                        return self._call_aliased(args)
                    e.hits += 1
                    if self._check or config.check_enabled():
                        return self._checked(e, leaves, args)
                    return e.run(leaves)
        if self._fell_back:  # past the recompile limit: new signatures run eagerly
            self._stats["misses"] += 1
            return self._call_eager_bound(args)
        return self._miss(args, leaves, spec, gm)

    def _call_aliased(self, args):
        """A call whose tensors share memory, for an entry that writes to an input: the
        compiled program reads every input before writing any, so only eager order is right."""
        self._stats["alias_fallbacks"] = self._stats.get("alias_fallbacks", 0) + 1
        config.topic("recompiles").info("%s: arguments share memory and the function writes to "
                                        "one in place: running eagerly", self.__name__)
        return self._call_eager_bound(args)

    def _call_inline(self, args, kwargs):
        fn = self._get_trace_fn()
        if self._bound_self is not None:
            return fn(self._bound_self, *args, **kwargs)
        return fn(*args, **kwargs)

    def _bind(self, args, kwargs):
        try:
            if self._bound_self is not None:
                ba = self._sig.bind(self._bound_self, *args, **kwargs)
            else:
                ba = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            self._raise_python_arg_error(args, kwargs)
            raise TypeError(f"{self.__name__}() {e}") from None
        ba.apply_defaults()
        vals = []
        for name, p in list(self._sig.parameters.items())[1 if self._bound_self is not None else 0:]:
            v = ba.arguments[name]
            if p.kind == p.VAR_POSITIONAL:
                vals.append(tuple(v))
            elif p.kind == p.VAR_KEYWORD:
                vals.append(dict(v))
            else:
                vals.append(v)
        return tuple(vals)

    def _raise_python_arg_error(self, args, kwargs):
        """Raise the TypeError Python itself gives for these arguments, by calling a stub
        with the function's parameters (and defaults, and qualified name) but no body."""
        try:
            stub = _arg_stub(self._fn)
        except Exception:  # an unusual callable (a builtin): keep the inspect-based message
            return
        try:
            if self._bound_self is not None:
                stub(self._bound_self, *args, **kwargs)
            else:
                stub(*args, **kwargs)
        except TypeError as e:
            raise e.with_traceback(None) from None

    # ---- capture ------------------------------------------------------------------------
    def _describe(self, leaves, names):
        descs = []
        for i, (x, name) in enumerate(zip(leaves, names)):
            if isinstance(x, Tensor):
                if isinstance(x, Tracer):
                    raise TraceError(f"argument {name!r} is a tensor being traced by an enclosing "
                                     f"compiled function; nested compilation is not supported")
                shape = tuple(x._data.shape)
                descs.append(LeafDesc("tensor", name, x.dtype, x.device, x.requires_grad, shape))
            elif _runtime_scalar(x, self._mode):
                descs.append(LeafDesc("scalar", name, value=type(x)))
            elif isinstance(x, (bool, int, float, str, type(None), bytes)) or _dt_like(x):
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
            if s[0] is dict:
                for k, sub in zip(s[1], s[2]):
                    walk(x[k], sub, f"{path}[{k!r}]")
            else:
                for j, sub in enumerate(s[1]):
                    walk(x[j], sub, f"{path}[{j}]")
        for i, (a, s) in enumerate(zip(args, spec[1])):
            walk(a, s, self._names[i] if i < len(self._names) else f"arg{i}")
        return names

    def _miss(self, args, leaves, spec, gm):
        with self._lock:
            # Threads making the same first call wait here for one capture: an entry that
            # another thread added while this one waited serves this call too.
            waited = next((e for e in self._entries
                           if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm)), None)
            if waited is None:
                entry, saved = self._capture_for(args, leaves, spec, gm)
                if entry is None:  # past the recompile limit
                    return self._call_eager_bound(args)
        if waited is not None:
            if waited.no_alias and waited.aliased(leaves):
                return self._call_aliased(args)
            waited.hits += 1
            if self._check or config.check_enabled():
                return self._checked(waited, leaves, args)
            return waited.run(leaves)
        if entry.no_alias and entry.aliased(leaves):
            return self._call_aliased(args)
        try:
            if self._check or config.check_enabled():
                return self._checked(entry, leaves, args)
            return entry.run(leaves)
        except CompileError:
            # Kernels compile on the first call that uses them: an entry whose first
            # run could not compile one is dropped like a failed capture.
            with self._lock:
                if entry in self._entries:
                    self._entries.remove(entry)
                    if entry in self._flat_entries:
                        self._flat_entries.remove(entry)
                    self._stats["compiles"] -= 1
                    self._dynamic, self._static, self._force_dynamic = saved
            raise

    def _capture_for(self, args, leaves, spec, gm):
        """Capture and cache an entry for this call (under the lock): (entry, the dynamic-dim
        state to restore if its first run fails), or (None, None) past the recompile limit."""
        self._stats["misses"] += 1
        names = self._leaf_names(args, spec)
        descs = self._describe(leaves, names)
        reasons = self._recompile_reasons(descs, spec, gm, leaves)
        if self._stats["compiles"] >= self._limit:
            self._note_reasons(reasons)
            if not self._fell_back:
                self._fell_back = True
                self._stats["eager_fallbacks"] += 1
                msg = (f"tracejit: {self.__name__} hit the recompile limit ({self._limit}); it now runs "
                       f"eagerly for new input signatures. Last reasons: "
                       f"{'; '.join(self._stats['recompile_reasons'][-3:])}. "
                       f"Raise it with recompile_limit=, or mark varying inputs dynamic=True.")
                # One warning, attributed to the user's calling line (not to this file);
                # the recompiles topic logs it too when enabled.
                warnings.warn(msg, RuntimeWarning, stacklevel=_user_stacklevel())
                config.topic("recompiles").info(msg)
            return None, None
        saved = (set(self._dynamic), set(self._static), self._force_dynamic)
        if self._entries:
            self._mark_dynamic(descs)
        try:
            entry = self._capture(leaves, spec, descs, gm)
        except BaseException:
            # Nothing is kept from a capture that failed.
            self._dynamic, self._static, self._force_dynamic = saved
            raise
        self._note_reasons(reasons)
        entry.arg_spec = spec
        self._entries.append(entry)
        if spec == (list, (None,) * len(spec[1])):
            self._flat_entries.append(entry)
        self._stats["compiles"] += 1
        return entry, saved

    def _note_reasons(self, reasons):
        if reasons:
            self._stats["recompile_reasons"].extend(reasons)
            config.topic("recompiles").info("recompiling %s: %s", self.__name__, "; ".join(reasons))

    def _recompile_reasons(self, descs, spec, gm, leaves=None) -> list:
        """Why no entry matched: the differences from the closest entry (fewest reasons)."""
        best = None
        for e in self._entries:
            if e.arg_spec != spec:
                reasons = ["the structure of the arguments changed (nesting of tuples/lists/dicts)"]
            else:
                reasons = describe_difference(e.descs, descs, e.grad_mode, gm)
                extra = getattr(e, "extra", None)
                if extra is not None and not extra():
                    describe = getattr(extra, "describe", None)
                    reasons += describe() if describe is not None else ["a custom guard failed"]
                # A captured tensor (parameter, closure) changed dtype/shape/requires_grad.
                reasons += describe_difference(e.const_descs, _const_descs(e.const_tensors), gm, gm)
                if e.decisions and leaves is not None and not reasons:
                    reasons += describe_decisions(e.decisions, leaves, [d.name for d in e.descs])
            if best is None or len(reasons) <= len(best):
                best = reasons
        return best or []

    def _mark_dynamic(self, descs):
        if not self._dynamic_ok:
            return
        for e in self._entries:
            old = e.descs
            if len(old) != len(descs):
                continue
            diffs = []
            ok = True
            for o, n in zip(old, descs):
                if o.kind != n.kind or (o.kind == "tensor" and (o.dtype is not n.dtype or o.device != n.device
                                                                or len(o.shape) != len(n.shape)
                                                                or o.requires_grad != n.requires_grad)):
                    ok = False
                    break
                if o.kind == "const" and not (o.value is n.value or _same_value(o.value, n.value)):
                    ok = False
                    break
                if o.kind == "tensor":
                    for j, (a, b) in enumerate(zip(o.shape, n.shape)):
                        if (isinstance(a, int) and a != b and a not in (0, 1) and b not in (0, 1)
                                and (n.name, j) not in self._static):
                            diffs.append((n.name, j))
            if ok and diffs:
                self._dynamic.update(diffs)
                config.topic("recompiles").info("%s: making dims dynamic: %s", self.__name__, diffs)
                return

    def _symbolic_descs(self, descs, allow_symbols: bool = True):
        """Replace dynamic dims by symbols; equal sizes share a symbol (checked by the guard)."""
        by_size: dict = {}
        out = []
        for d in descs:
            if d.kind != "tensor":
                out.append(d)
                continue
            shape = []
            for j, s in enumerate(d.shape):
                if (allow_symbols and s >= 2 and (d.name, j) not in self._static
                        and ((d.name, j) in self._dynamic or self._force_dynamic)):
                    sym = by_size.get(s)
                    if sym is None:
                        sym = by_size[s] = f"s{len(by_size)}"
                    shape.append(sym)
                else:
                    shape.append(s)
            out.append(LeafDesc("tensor", d.name, d.dtype, d.device, d.requires_grad, tuple(shape)))
        return out

    def _get_trace_fn(self):
        if self._trace_fn is None:
            if self._mode == "script":
                from .script import NoSource, convert
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

    def _trace(self, leaves, spec, sdescs, gm, const_names=None):
        """Run the function on tracers for `sdescs`; returns (ctx, out_atoms, out_leaves,
        out_spec, mutations)."""
        from ..ops.registry import Aval
        fn = self._get_trace_fn()
        ctx = TraceContext()
        ctx.capture_grad = gm
        ctx.leaves = list(leaves)  # Python decisions on runtime scalars read their values here
        if const_names is not None:
            ctx.const_names = const_names
        syms = {}
        with ctx, _gm.set_grad_enabled(gm):
            tracers = []
            orig_vars = []
            for x, d in zip(leaves, sdescs):
                if d.kind == "tensor":
                    shape = []
                    for s, actual in zip(d.shape, x._data.shape):
                        if isinstance(s, str):
                            sym = syms.get(s)
                            if sym is None:
                                sym = syms[s] = Sym.symbol(s, int(actual))
                            shape.append(sym)
                        else:
                            shape.append(s)
                    t = ctx.new_input(Aval(tuple(shape), d.dtype, d.device), _ident(d.name),
                                      requires_grad=d.requires_grad)
                    orig_vars.append((len(tracers), t._var))
                    tracers.append(t)
                elif d.kind == "scalar":
                    dt = _dt.scalar_dtype(x)
                    t = ctx.new_input(Aval((), dt, weak=True), _ident(d.name))
                    ctx.scalar_leaves[t._var] = len(tracers)
                    tracers.append(t)
                else:
                    tracers.append(x)
            targs, tkwargs = self._unbind(unflatten(spec, tracers))
            try:
                if self._bound_self is not None:
                    out = fn(self._bound_self, *targs, **tkwargs)
                else:
                    out = fn(*targs, **tkwargs)
            except RecursionError as exc:
                ctx.restore_attributes()
                raise _recursion_error(self._mode, exc) from None
            except BaseException:
                ctx.restore_attributes()   # a failed capture leaves no tracer in a module
                raise
            out_leaves_raw, out_spec = flatten(out)
            out_atoms, out_leaves = [], []
            for o in out_leaves_raw:
                if isinstance(o, Tensor):
                    at = ctx.atom(o)
                    number = isinstance(o, Tracer) and at.aval.weak and at.aval.shape == ()
                    out_leaves.append(("number" if number else "graph", len(out_atoms)))
                    out_atoms.append(at)
                else:
                    if type(o).__name__ == "Unbound":   # returned, but bound on one path only
                        raise o.error(" and returned from the function")
                    out_leaves.append(("static", o))
            mutations = []
            for i, v0 in orig_vars:
                if tracers[i]._var is not v0:  # an in-place op rebound this input
                    mutations.append((i, len(out_atoms)))
                    out_atoms.append(tracers[i]._var)
            ctx.state_writes = ctx.finish_state_writes(out_atoms)
        return ctx, out_atoms, out_leaves, out_spec, mutations

    def _capture(self, leaves, spec, descs, gm):
        allow_symbols = True
        for attempt in range(4):
            if attempt == 3:
                allow_symbols = False  # the last try is fully static: nothing left to specialize
            sdescs = self._symbolic_descs(descs, allow_symbols)
            symbolic = [(d.name, j) for d in sdescs if d.kind == "tensor"
                        for j, s in enumerate(d.shape) if isinstance(s, str)]
            try:
                ctx, out_atoms, out_leaves, out_spec, mutations = self._trace(
                    leaves, spec, sdescs, gm, self._const_names())
            except Exception:
                if not symbolic:
                    raise
                # Shape logic that symbolic dims cannot express: capture with static shapes
                # (if that fails too, its error is the user's).
                allow_symbols = False
                continue
            if ctx.specialized:
                # User code needed concrete sizes: keep those dims static from now on and
                # capture again.
                spec_dims = {(d.name, j) for d in sdescs if d.kind == "tensor"
                             for j, s in enumerate(d.shape) if isinstance(s, str) and s in ctx.specialized}
                self._static.update(spec_dims)
                self._dynamic -= spec_dims
                config.topic("recompiles").info("%s: dims %s are used as Python values; keeping them "
                                                "static", self.__name__, sorted(spec_dims))
                continue
            break
        if not allow_symbols:
            self._static.update(symbolic)
            self._dynamic -= set(symbolic)
        graph = ctx.graph(out_atoms, name=self.__name__)
        verify(graph)
        opt = optimize(graph)
        verify(opt)
        const_descs = _const_descs(ctx.const_tensors, self._const_names())
        extra = self._extra_guard
        if extra is not None and hasattr(extra, "snapshot"):
            extra = extra.snapshot()  # the state this capture saw, checked on every call
        decisions = list(ctx.decisions)
        guard, src = build_guard(sdescs, const_descs, gm, extra,
                                 decisions=make_check(decisions) if decisions else None)
        if decisions:
            names = [d.name for d in sdescs]
            src += "".join(f"# and {d.text(names)}\n" for d in decisions)
        config.topic("graphs").info("captured %s:\n%s", self.__name__, opt)
        config.topic("guards").info("guard for %s:\n%s", self.__name__, src)
        executor = self._make_executor(opt, gm)
        entry = Entry(sdescs, list(ctx.const_tensors), const_descs, gm, graph, opt, out_spec,
                      out_leaves, mutations, guard, src, executor, extra, decisions, ctx.state_writes)
        executor.attach(entry)  # a background compile replaces the entry's executor later
        return entry

    def _const_names(self):
        """Names for captured tensors: a module's parameter and buffer names."""
        names = getattr(self, "_named_tensors", None)
        return names() if names is not None else None

    def _make_executor(self, graph: Graph, gm: bool) -> Executor:
        return executor_for(self._compiler, graph, grad_mode=gm, name=self.__name__,
                            compile_mode=self._compile_mode, lock=self._lock, owner=self)

    # ---- check mode -------------------------------------------------------------------
    def _checked(self, entry, leaves, args):
        from .check import run_checked
        return run_checked(self, entry, leaves, args)

    # ---- introspection ------------------------------------------------------------------
    def cache_stats(self) -> dict:
        s = dict(self._stats)
        # Hits are counted per entry (one increment on the hot path, not two).
        s["hits"] = self._stats["hits"] + sum(e.hits for e in self._entries)
        s["recompile_reasons"] = list(s["recompile_reasons"])
        s["entries"] = len(self._entries)
        s["tiers"] = [e.executor.tier for e in self._entries]
        s["pending_kernels"] = sum(e.executor.pending_kernels() for e in self._entries)
        s["dynamic_dims"] = sorted(self._dynamic)
        return s

    def compile(self, *args, **kwargs) -> None:
        """Capture and compile the entry these example arguments need, now, without running
        the function (nothing is updated): a deployment calls it at start-up so that its first
        real call is compiled. Waits for the kernels (loads them from the disk cache when
        they are there)."""
        if self._eager or self._compiler in (None, "interpret"):
            return
        if kwargs or not self._simple or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        leaves, spec = flatten(list(args))
        with self._lock:
            entry = next((e for e in self._entries
                          if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm)), None)
            if entry is None:
                entry, _ = self._capture_for(args, leaves, spec, gm)
        if entry is None:  # past the recompile limit: such calls run eagerly
            return
        ins = [leaves[i] for i in entry.input_leaf_idx] + list(entry.const_tensors)
        entry.executor.precompile(ins, entry.grad_mode)

    def reset(self) -> None:
        with self._lock:
            self._entries.clear()
            self._flat_entries.clear()
            self._dynamic.clear()
            self._static.clear()
            self._fell_back = False
            self._stats = {"compiles": 0, "hits": 0, "misses": 0, "recompile_reasons": [],
                           "eager_fallbacks": 0}

    def explain(self, *args, **kwargs):
        from .explain import explain
        return explain(self, *args, **kwargs)

    @property
    def entries(self) -> list:
        return list(self._entries)

    def entry_for(self, *args, **kwargs) -> Optional[Entry]:
        """The cached entry a call with these arguments runs now (grad mode included), or
        None when such a call would capture, or run eagerly."""
        if kwargs or not self._simple or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        leaves, spec = flatten(list(args))
        for e in list(self._entries):
            if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm):
                return e
        return None

    def __repr__(self) -> str:
        return f"<tracejit.{self._mode} {self.__name__}: {len(self._entries)} entries>"


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
        else:
            _, obj, name, k = w
            if _is_buffer(obj, name):
                obj.__dict__["_buffers"][name] = outs[k].detach()
            else:
                object.__setattr__(obj, name, outs[k].detach())


def _is_buffer(obj, name: str) -> bool:
    bufs = getattr(obj, "__dict__", {}).get("_buffers")
    return bufs is not None and name in bufs


def _recursion_error(mode: str, exc: RecursionError) -> Exception:
    """A function that calls itself while being captured: name it and the line."""
    import collections
    import os
    counts: collections.Counter = collections.Counter()
    lines = {}
    from ..errors import _PKG_DIR
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


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points `warnings.warn`, called here, at the innermost frame
    outside tracejit (the user's call, however many of our frames lie between)."""
    from ..errors import user_frame
    target = user_frame(2)
    f, level = sys._getframe(1), 1
    while f is not None and f is not target:
        f, level = f.f_back, level + 1
    return level if f is not None else 1


def _arg_stub(fn):
    sig = inspect.signature(fn)
    params = [p.replace(annotation=p.empty, default=None if p.default is not p.empty else p.empty)
              for p in sig.parameters.values()]
    ns: dict = {}
    exec(f"def stub{inspect.Signature(params)}: pass", ns)
    stub = ns["stub"]
    if isinstance(fn, types.FunctionType):  # its own defaults (others keep placeholders)
        stub.__defaults__ = fn.__defaults__
        stub.__kwdefaults__ = fn.__kwdefaults__
    stub.__qualname__ = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
    stub.__code__ = stub.__code__.replace(co_name=getattr(fn, "__name__", "stub"),
                                          co_qualname=stub.__qualname__)
    return stub


def _const_descs(tensors, names=None) -> list:
    out = []
    for t in tensors:
        label = (names or {}).get(id(t)) or t._name or type(t).__name__
        out.append(LeafDesc("tensor", f"<captured {label} {tuple(t._data.shape)}>", t.dtype, t.device,
                            t.requires_grad, tuple(t._data.shape)))
    return out


def _any_overlap(arrays) -> bool:
    """Whether any two arrays may share memory (numpy's bounds check; identity of the
    owning buffer for other array types)."""
    for i in range(1, len(arrays)):
        a = arrays[i]
        for b in arrays[:i]:
            if a is b:
                return True
            if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                if a.size and b.size and np.may_share_memory(a, b):
                    return True
            elif _owner(a) is _owner(b):
                return True
    return False


def _owner(a):
    while getattr(a, "base", None) is not None:
        a = a.base
    return a


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")


def _runtime_scalar(x, mode: str) -> bool:
    """Is this argument leaf a runtime input of the graph (rather than specialized)?

    @trace: Python floats (a learning rate, the previous loss) are inputs; ints and bools
    usually decide sizes and structure, and stay specialized (guarded by value).
    @script: ints and floats are inputs (its loops and branches on them become graph
    control flow); bools are flags that steer Python structure (``has_mask=True``) and are
    specialized. Either way, Python code that needs an input's value (``if lr > 0.1``,
    ``x.view(n, -1)``) gets it, and the entry is guarded on that decision (see scalars.py).
    """
    t = type(x)
    if mode == "script":
        return t is int or t is float
    return t is float


def _dt_like(x) -> bool:
    return isinstance(x, (_dt.DType,)) or type(x).__name__ == "device"
