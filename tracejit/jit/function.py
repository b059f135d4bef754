"""`CompiledFunction`: what ``@trace`` and ``@script`` return.

A call is matched against the cached entries by their guards; a hit runs the
entry's program, a miss captures the function again. Each entry is one traced
graph, optimized by the passes, plus its executor (the reference interpreter, or
compiled kernels once the compiler is enabled). When a call differs from an
existing entry only in some dims, those dims become symbolic for the next capture
("automatic dynamic shapes"), so a batch-size sweep costs two or three captures.
Past ``recompile_limit`` captures the function runs eagerly, with one warning.
"""
from __future__ import annotations

import functools
import inspect
import threading
import warnings
from typing import Any, Callable, Optional

from .. import dtypes as _dt
from ..autograd import grad_mode as _gm
from ..errors import CheckMismatchError, ScriptError, TraceError
from ..shapes import Sym
from ..tensor import Tensor
from . import config
from .guards import LeafDesc, build_guard, describe_difference
from .ir import Graph, verify
from .interpreter import interpret
from .passes import optimize
from .pytree import flatten, unflatten
from .tracer import TraceContext, Tracer

__all__ = ["CompiledFunction", "Entry", "DEFAULT_RECOMPILE_LIMIT"]

DEFAULT_RECOMPILE_LIMIT = 8


class Entry:
    """One capture: guard + graph + how to run it."""

    def __init__(self, descs, const_tensors, const_descs, grad_mode, graph, opt_graph, out_spec,
                 out_leaves, mutations, guard, guard_src, executor):
        self.descs = descs
        self.const_tensors = const_tensors
        self.const_descs = const_descs
        self.grad_mode = grad_mode
        self.graph = graph
        self.opt_graph = opt_graph
        self.out_spec = out_spec
        self.out_leaves = out_leaves    # per output leaf: ("graph", k) or ("static", value)
        self.mutations = mutations      # [(leaf index, graph output index)]
        self.guard = guard
        self.guard_src = guard_src
        self.executor = executor
        self.hits = 0
        self.input_leaf_idx = [i for i, d in enumerate(descs) if d.kind in ("tensor", "scalar")]

    def run(self, leaves):
        ins = [leaves[i] for i in self.input_leaf_idx]
        ins.extend(self.const_tensors)
        outs = self.executor(ins)
        for leaf_i, k in self.mutations:
            leaves[leaf_i]._assign(outs[k], "in-place update of an input")
        res = [outs[x[1]] if x[0] == "graph" else x[1] for x in self.out_leaves]
        return unflatten(self.out_spec, res)


class CompiledFunction:
    """A function compiled per input signature. Call it like the original."""

    def __init__(self, fn: Callable, *, mode: str = "trace", eager: bool = False, check: bool = False,
                 recompile_limit: int = DEFAULT_RECOMPILE_LIMIT, dynamic: Optional[bool] = None,
                 compiler: Optional[str] = None, bound_self: Any = None, extra_guard=None):
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
        self._bound_self = bound_self
        self._extra_guard = extra_guard
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        if bound_self is not None:
            params = params[1:]
        self._names = [p.name for p in params]
        self._simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self._nparams = len(params)
        self._trace_fn = None  # the function actually traced (script rewrites it)
        self._entries: list = []
        self._dynamic: set = set()     # (leaf name, dim) made symbolic
        self._lock = threading.RLock()
        self._fell_back = False
        self._stats = {"compiles": 0, "hits": 0, "misses": 0, "recompile_reasons": [],
                       "eager_fallbacks": 0}
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

    def __call__(self, *args, **kwargs):
        if self._eager or self._fell_back or config.is_eager():
            return self._call_eager(args, kwargs)
        if kwargs or not self._simple or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        # The hot path: flat arguments checked by generated guards.
        for e in self._entries:
            if e.guard(args, e.const_tensors, gm):
                e.hits += 1
                self._stats["hits"] += 1
                if self._check or config.check_enabled():
                    return self._checked(e, list(args), args)
                return e.run(args) if type(args) is list else e.run(list(args))
        leaves, spec = flatten(list(args))
        if spec != (list, tuple([None] * len(args))):
            for e in self._entries:
                if getattr(e, "arg_spec", None) == spec and e.guard(leaves, e.const_tensors, gm):
                    e.hits += 1
                    self._stats["hits"] += 1
                    return e.run(leaves)
        return self._miss(args, leaves, spec, gm)

    def _bind(self, args, kwargs):
        try:
            if self._bound_self is not None:
                ba = self._sig.bind(self._bound_self, *args, **kwargs)
            else:
                ba = self._sig.bind(*args, **kwargs)
        except TypeError as e:
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
            elif isinstance(x, (bool, int, float)) and self._mode == "script":
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
            self._stats["misses"] += 1
            names = self._leaf_names(args, spec)
            descs = self._describe(leaves, names)
            if self._entries:
                last = self._entries[-1]
                reasons = describe_difference(last.descs, descs, last.grad_mode, gm)
                self._stats["recompile_reasons"].extend(reasons)
                config.topic("recompiles").info("recompiling %s: %s", self.__name__, "; ".join(reasons))
                self._mark_dynamic(descs)
            if self._stats["compiles"] >= self._limit:
                if not self._fell_back:
                    self._fell_back = True
                    self._stats["eager_fallbacks"] += 1
                    msg = (f"tracejit: {self.__name__} hit the recompile limit ({self._limit}); it now runs "
                           f"eagerly. Last reasons: {'; '.join(self._stats['recompile_reasons'][-3:])}. "
                           f"Raise it with recompile_limit=, or mark varying inputs dynamic=True.")
                    warnings.warn(msg, RuntimeWarning, stacklevel=3)
                    config.log.warning(msg)
                return self._call_eager(tuple(args), {})
            entry = self._capture(leaves, spec, descs, gm)
            entry.arg_spec = spec
            self._entries.append(entry)
            self._stats["compiles"] += 1
        if self._check or config.check_enabled():
            return self._checked(entry, leaves, args)
        return entry.run(leaves)

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
                if o.kind == "const" and not (o.value is n.value or o.value == n.value):
                    ok = False
                    break
                if o.kind == "tensor":
                    for j, (a, b) in enumerate(zip(o.shape, n.shape)):
                        if isinstance(a, int) and a != b and a not in (0, 1) and b not in (0, 1):
                            diffs.append((n.name, j))
            if ok and diffs:
                self._dynamic.update(diffs)
                config.topic("recompiles").info("%s: making dims dynamic: %s", self.__name__, diffs)
                return

    def _symbolic_descs(self, descs):
        """Replace dynamic dims by symbols; equal sizes share a symbol (checked by the guard)."""
        by_size: dict = {}
        out = []
        for d in descs:
            if d.kind != "tensor":
                out.append(d)
                continue
            shape = []
            for j, s in enumerate(d.shape):
                if ((d.name, j) in self._dynamic or self._force_dynamic and s >= 2) and s >= 2:
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
                from .script import convert
                self._trace_fn = convert(self._fn)
            else:
                self._trace_fn = self._fn
        return self._trace_fn

    def _capture(self, leaves, spec, descs, gm):
        from ..ops.registry import Aval
        fn = self._get_trace_fn()
        for _attempt in range(3):
            sdescs = self._symbolic_descs(descs)
            ctx = TraceContext()
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
                        tracers.append(ctx.new_input(Aval((), dt, weak=True), _ident(d.name)))
                    else:
                        tracers.append(x)
                targs = unflatten(spec, tracers)
                if self._bound_self is not None:
                    out = fn(self._bound_self, *targs)
                else:
                    out = fn(*targs)
                out_leaves_raw, out_spec = flatten(out)
                out_atoms, out_leaves = [], []
                for o in out_leaves_raw:
                    if isinstance(o, Tensor):
                        out_leaves.append(("graph", len(out_atoms)))
                        out_atoms.append(ctx.atom(o))
                    else:
                        out_leaves.append(("static", o))
                mutations = []
                for i, v0 in orig_vars:
                    if tracers[i]._var is not v0:  # an in-place op rebound this input
                        mutations.append((i, len(out_atoms)))
                        out_atoms.append(tracers[i]._var)
            if ctx.specialized:
                # User code needed concrete sizes: keep those dims static and capture again.
                self._dynamic = {(n, j) for (n, j) in self._dynamic
                                 if not any(d.name == n and isinstance(d.shape[j], str) and d.shape[j] in ctx.specialized
                                            for d in sdescs if d.kind == "tensor")}
                self._force_dynamic = False
                continue
            break
        graph = ctx.graph(out_atoms, name=self.__name__)
        verify(graph)
        opt = optimize(graph)
        verify(opt)
        const_descs = [LeafDesc("tensor", f"<captured {t._name or type(t).__name__} {tuple(t._data.shape)}>",
                                t.dtype, t.device, t.requires_grad, tuple(t._data.shape))
                       for t in ctx.const_tensors]
        guard, src = build_guard(sdescs, const_descs, gm, self._extra_guard)
        config.topic("graphs").info("captured %s:\n%s", self.__name__, opt)
        config.topic("guards").info("guard for %s:\n%s", self.__name__, src)
        executor = self._make_executor(opt, gm)
        return Entry(sdescs, list(ctx.const_tensors), const_descs, gm, graph, opt, out_spec,
                     out_leaves, mutations, guard, src, executor)

    def _make_executor(self, graph: Graph, gm: bool):
        compiler = self._compiler
        if compiler is None or compiler == "interpret" or not _compiler_available():
            return functools.partial(interpret, graph)
        from ..compiler import compile_graph  # the numba backend
        return compile_graph(graph, grad_mode=gm, name=self.__name__)

    # ---- check mode -------------------------------------------------------------------
    def _checked(self, entry, leaves, args):
        from .check import run_checked
        return run_checked(self, entry, leaves, args)

    # ---- introspection ------------------------------------------------------------------
    def cache_stats(self) -> dict:
        s = dict(self._stats)
        s["recompile_reasons"] = list(s["recompile_reasons"])
        s["entries"] = len(self._entries)
        s["dynamic_dims"] = sorted(self._dynamic)
        return s

    def reset(self) -> None:
        with self._lock:
            self._entries.clear()
            self._dynamic.clear()
            self._fell_back = False
            self._stats = {"compiles": 0, "hits": 0, "misses": 0, "recompile_reasons": [],
                           "eager_fallbacks": 0}

    def explain(self, *args, **kwargs):
        from .explain import explain
        return explain(self, *args, **kwargs)

    @property
    def entries(self) -> list:
        return list(self._entries)

    def __repr__(self) -> str:
        return f"<tracejit.{self._mode} {self.__name__}: {len(self._entries)} entries>"


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")


def _dt_like(x) -> bool:
    return isinstance(x, (_dt.DType,)) or type(x).__name__ == "device"


def _compiler_available() -> bool:
    try:
        from ..compiler import compile_graph  # noqa: F401
    except ImportError:
        return False
    return True
