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

Here: calling (the hot path, binding arguments, the slow path and misses) and
introspection. Capturing a call is in capture.py (`Capture`, a base class), an entry
and how it runs in entry.py, executors in backend.py.
"""
from __future__ import annotations

import functools
import inspect
import threading
import types
import weakref
from typing import Any, Callable, Optional

from ..autograd import grad_mode as _gm
from ..ops import registry as _reg
from . import config
from .backend import raise_kernel_error
from .capture import Capture
from .config import plain_call
from .entry import Entry
from .guards import MISS
from .pytree import flatten
from .tracer import SymbolicSizeError

__all__ = ["CompiledFunction", "Entry", "DEFAULT_RECOMPILE_LIMIT", "compiled_function_of", "all_compiled"]

DEFAULT_RECOMPILE_LIMIT = 8

_instances: "weakref.WeakSet" = weakref.WeakSet()   # every live CompiledFunction (`all_compiled`)
# a module class's forward -> its compiled modules that missed: `_adopt` reuses their captures
SIBLINGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def all_compiled() -> list:
    """Every compiled function alive now (a compiled module's: its forward)."""
    return list(_instances)


class CompiledFunction(Capture):
    """A function compiled per input signature. Call it like the original."""

    def __init__(self, fn: Callable, *, mode: str = "trace", eager: bool = False, check: bool = False,
                 recompile_limit: Optional[int] = None, dynamic: Optional[bool] = None,
                 compiler: Optional[str] = None, bound_self: Any = None, extra_guard=None,
                 compile: Optional[str] = None, tensor_names: Optional[Callable[[], dict]] = None,
                 fullgraph: bool = True, side_effects: bool = False):
        if not callable(fn):
            raise TypeError(f"tracejit.{mode} expects a function or an nn.Module, got {type(fn).__name__}")
        self._fn = fn
        self._mode = mode
        # the options a copy is built with (`__deepcopy__`)
        if recompile_limit is None:   # read now: torch._dynamo.config.cache_size_limit sets it
            recompile_limit = DEFAULT_RECOMPILE_LIMIT
        self._options = dict(eager=eager, check=check, recompile_limit=recompile_limit, dynamic=dynamic,
                             compiler=compiler, compile=compile, fullgraph=fullgraph, side_effects=side_effects)
        # False (tracejit.compile's default, as torch.compile's): a capture that fails runs
        # the function eagerly with a warning; True (@trace, @script): it raises
        self._fullgraph = fullgraph
        # True (tracejit.compile, as torch.compile runs them on every call): Python side
        # effects seen while capturing refuse the capture (jit/side_effects.py); False
        # (@trace, @script, as torch.jit.trace): they run once, at capture
        self._side_effects = side_effects
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
        self._bound = () if bound_self is None else (bound_self,)   # what a call passes first
        if extra_guard is None and bound_self is None:
            from .python_refs import python_refs_guard
            extra_guard = python_refs_guard(fn)   # its global/closure numbers, or None
        self._extra_guard = extra_guard
        self._tensor_names = tensor_names  # {id(tensor): name} of a module's parameters and buffers
        self._sig = inspect.signature(fn)
        params = list(self._sig.parameters.values())
        if bound_self is not None:
            params = params[1:]
        self._names = [p.name for p in params]
        self._simple = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        self._nparams = len(params)
        # keyword-or-positional parameters' defaults: `_bind`'s quick path without inspect
        self._defaults = [p.default for p in params] \
            if all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params) else None
        self._hot_ok = self._simple and not eager and not check
        self._trace_fn = None  # the function actually traced (script rewrites it)
        self._entries: list = []
        self._flat_entries: list = []  # entries captured from flat arguments (the hot path)
        self._dynamic: set = set()     # (leaf name, dim) made symbolic
        self._static: dict = {}        # (leaf name, dim) never symbolic -> why (the code needed its value)
        self._grown: set = set()       # dynamic dims that were 1 (a broadcast): see Capture._capture
        self._dynamic_ints: set = set()  # int argument leaves seen with two values: runtime inputs
        self._static_ints: set = set()   # ints whose capture as runtime inputs failed: specialized
        self._fixed_size_ints: set = set()  # int arguments code needed the value of: never sizes
        self._lifted_numbers: set = set()  # numbers read from Python state seen changing (lifted.py)
        self._const_arrays: set = set()  # numpy array arguments kept constants (numpy_args.py)
        # a built-in layer refuses an array eagerly (a TypeError naming the layer): its arrays
        # stay constants, so that the compiled call refuses it alike
        owner = bound_self if bound_self is not None else getattr(fn, "__self__", None)
        self._array_inputs = not type(owner).__module__.startswith("tracejit.nn")
        self._numpy_read: set = set()    # those numpy code read
        self._static_numbers: set = set()  # those whose capture as runtime inputs failed
        self._lock = threading.RLock()
        self._fell_back = False
        self._split = None         # a module forward that broke: its submodules' (submodules.py)
        self._quiet_break = False  # a submodule's forward: its break logged, not warned
        self._stats = _new_stats()
        # functools.partial and other callables have no __name__: messages still need one.
        self.__name__ = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) \
            or type(fn).__name__
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        functools.update_wrapper(self, fn)
        _instances.add(self)

    def __deepcopy__(self, memo) -> "CompiledFunction":
        """The same function compiled afresh, with no entries; a compiled module's forward is
        bound to the copied module (``copy.deepcopy`` of a compiled model: a teacher, an EMA)."""
        if self._bound_self is None:
            return CompiledFunction(self._fn, mode=self._mode, **self._options)
        import copy
        from .compiled_module import compiled_forward
        return compiled_forward(copy.deepcopy(self._bound_self, memo), self._mode, self._options)

    # ---- calling ----------------------------------------------------------------------
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def _call_eager(self, args, kwargs):
        if self._split is not None:   # (a function that broke the graph: its modules compiled)
            return self._split.call(self._fn, *self._bound, *args, **kwargs)
        return self._fn(*self._bound, *args, **kwargs)

    def run_eagerly(self, vals):
        """Run the Python function on per-parameter values (as `_bind` gives them)."""
        args, kwargs = self._unbind(vals)
        return self._call_eager(args, kwargs)

    def _unbind(self, vals):
        """Per-parameter values -> (args, kwargs) to call the function with."""
        if self._simple:
            return tuple(vals), {}
        args, kwargs = [], {}
        params = list(self._sig.parameters.values())[len(self._bound):]
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
        if self._eager or not plain_call() and config.is_eager():   # (plain: no env lookups)
            return self._call_eager(args, kwargs)
        if _reg.trace_state.tracer is not None:
            # Called from inside another function being captured: inline it there.
            return self._call_inline(args, kwargs)
        args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        # Each entry's generated hit guards and runs in one call; an aliased call misses it
        # and `_miss` finds the entry by its guard (`_run_hit` then runs it eagerly).
        hit = plain_call() and not self._check
        for e in self._flat_entries:
            if hit:
                r = e.hit(args, gm)
                if r is not MISS:
                    return r
            elif e.guard(args, e.const_tensors, gm):
                return self._run_hit(e, args, args)
        leaves, spec = flatten(list(args))
        if spec != (list, tuple([None] * len(args))):
            for e in self._entries:
                if e.arg_spec != spec:
                    continue
                if hit and not e.arg_writes:   # (one that stores into its arguments needs them)
                    r = e.hit(leaves, gm)
                    if r is not MISS:
                        return r
                elif e.guard(leaves, e.const_tensors, gm):
                    return self._run_hit(e, leaves, args)
        if self._fell_back:  # past the recompile limit or a graph break: eagerly, no capture
            self._stats["eager_calls"] += 1
            return self.run_eagerly(args)
        return self._miss(args, leaves, spec, gm)

    def _run_hit(self, e: Entry, leaves, args):
        """Run entry `e`, whose guard this call passed, on its `leaves`."""
        if e.no_alias and e.aliased(leaves):
            return self._call_aliased(args)
        e.hits += 1
        if self._check or not plain_call() and config.check_enabled():
            return self._checked(e, list(leaves), args)
        return e.run(leaves, args)

    def _call_aliased(self, args):
        """A call whose tensors share memory, for an entry that writes to an input: the
        compiled program reads every input before writing any, so only eager order is right."""
        self._stats["alias_fallbacks"] = self._stats.get("alias_fallbacks", 0) + 1
        config.topic("recompiles").info("%s: arguments share memory and the function writes to "
                                        "one in place: running eagerly", self.__name__)
        return self.run_eagerly(args)

    def _call_inline(self, args, kwargs):
        return self._get_trace_fn()(*self._bound, *args, **kwargs)

    def _bind(self, args, kwargs):
        """Per-parameter values of a call with these arguments."""
        if not kwargs and self._simple and len(args) == self._nparams:
            return args
        d = self._defaults
        if d is not None and len(args) <= len(d):
            # keywords and defaults filled in by name (inspect's bind costs ~8 us a call); any
            # mismatch (an unknown or repeated name, a missing value) takes inspect's path and error
            n, found = len(args), 0
            vals = list(args)
            for name, v in zip(self._names[n:], d[n:]):
                if name in kwargs:
                    v = kwargs[name]
                    found += 1
                elif v is inspect.Parameter.empty:
                    break
                vals.append(v)
            if found == len(kwargs) and len(vals) == len(d):
                return tuple(vals)
        try:
            ba = self._sig.bind(*self._bound, *args, **kwargs)
        except TypeError as e:
            self._raise_python_arg_error(args, kwargs)
            raise TypeError(f"{self.__name__}() {e}") from None
        ba.apply_defaults()
        vals = []
        for name, p in list(self._sig.parameters.items())[len(self._bound):]:
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
            stub(*self._bound, *args, **kwargs)
        except TypeError as e:
            raise e.with_traceback(None) from None

    def _miss(self, args, leaves, spec, gm):
        with self._lock:
            # Threads making the same first call wait here for one capture: an entry that
            # another thread added while this one waited serves this call too.
            waited = self._lookup(leaves, spec, gm) or self._adopt(leaves, spec, gm)
            if waited is None:
                entry, saved = self._capture_for(args, leaves, spec, gm)
                if entry is None:  # past the recompile limit
                    return self.run_eagerly(args)
        if waited is not None:
            return self._run_hit(waited, leaves, args)
        if entry.no_alias and entry.aliased(leaves):
            return self._call_aliased(args)
        try:
            if self._check or config.check_enabled():
                return self._checked(entry, leaves, args)
            return entry.run(leaves, args)
        except SymbolicSizeError as exc:
            # Its gradient needs some symbolic sizes' values: capture those dims static.
            self._drop(entry, saved)
            self._make_static(entry, exc)
            return self._miss(args, leaves, spec, gm)
        except BaseException:
            # An entry whose first run failed (a kernel that could not compile, a value
            # the run refused) is dropped like a failed capture: the next call captures
            # again and meets the same error, and the counters show no entry.
            self._drop(entry, saved)
            raise

    def _adopt(self, leaves, spec, gm) -> Optional[Entry]:
        """The capture of another compiled module of this class whose guard this call passes,
        on this module's own parameters (torch.compile keeps one cache per code object: a
        target network, twin critics, two generators capture once), or None."""
        me = self._bound_self
        if me is None or self._check or not hasattr(self._extra_guard, "module"):
            return None
        from .module_guard import sibling_check
        siblings = SIBLINGS.setdefault(self._fn, weakref.WeakSet())
        others = list(siblings)
        siblings.add(self)
        for cf in others:
            if cf is self or type(cf._bound_self) is not type(me) or cf._options != self._options \
                    or cf._mode != self._mode:
                continue
            for e in list(cf._entries):
                found = sibling_check(e.extra, me) if e.arg_spec == spec and e.grad_mode == gm else None
                e = found and e.rebound(*found)
                if e is not None and e.guard(leaves, e.const_tensors, gm):
                    self._entries.append(e)
                    if spec == (list, (None,) * len(spec[1])):
                        self._flat_entries.append(e)
                    config.topic("recompiles").info("%s: reusing the capture of another instance",
                                                    self.__name__)
                    return e
        return None

    def _drop(self, entry: Entry, saved) -> None:
        """Forget an entry whose first run failed, and the dynamic dims its capture chose."""
        with self._lock:
            if entry in self._entries:
                self._entries.remove(entry)
                if entry in self._flat_entries:
                    self._flat_entries.remove(entry)
                self._stats["compiles"] -= 1
                self._dynamic, self._static, self._force_dynamic = saved

    def _make_static(self, entry: Entry, exc: "SymbolicSizeError") -> None:
        dims = {(d.name, j) for d in entry.descs if d.kind == "tensor"
                for j, s in enumerate(d.shape) if isinstance(s, str) and s in exc.symbols}
        ints = {d.name for d in entry.descs if d.kind == "scalar" and d.name in self._dynamic_ints}
        with self._lock:
            self._static.update(dict.fromkeys(dims, f"its value was needed: {exc}"))
            self._dynamic -= dims
            self._fixed_size_ints |= ints   # (were they sizes, their values are needed)
        config.topic("recompiles").info("%s: %s; capturing dims %s static", self.__name__, exc,
                                        sorted(dims))

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
        # kernels in + pending = all an entry needs, once it has planned; `planning` counts
        # the entries whose kernels are not known yet (background mode)
        counts = [e.origin.kernel_counts() for e in self._entries]
        s["kernels_done"] = sum(c[0] for c in counts if c is not None)
        s["pending_kernels"] = sum(e.origin.pending_kernels() for e in self._entries)
        s["planning"] = sum(1 for c in counts if c is None)
        s["dynamic_dims"] = sorted(self._dynamic)
        if self._split is not None:
            s["submodules"] = self._split.stats()
        return s

    def compile(self, *args, **kwargs) -> None:
        """Capture and compile the entry these example arguments need, now, without running
        the function (nothing is updated): a deployment calls it at start-up so that its first
        real call is compiled. Waits for the kernels (loads them from the disk cache when
        they are there)."""
        if self._eager or self._compiler in (None, "interpret"):
            return
        while True:
            entry, saved, leaves = self._example_entry(args, kwargs)
            if entry is None:  # past the recompile limit: such calls run eagerly
                return
            ins = entry.graph_inputs(leaves)
            try:
                entry.executor.precompile(ins, entry.grad_mode)
                return
            except SymbolicSizeError as exc:   # as in `_miss`: capture those dims static
                self._drop(entry, saved if saved is not None else
                           (set(self._dynamic), dict(self._static), self._force_dynamic))
                self._make_static(entry, exc)

    def capture(self, *args, **kwargs) -> Optional[Entry]:
        """Capture the entry these example arguments need, now, without running the function
        or compiling anything (``torch.jit.trace``'s example inputs): a later call with such
        arguments finds it. Returns the entry, or None in eager mode and past the recompile
        limit."""
        if self._eager:
            return None
        return self._example_entry(args, kwargs)[0]

    def _example_entry(self, args, kwargs):
        """(the entry for these arguments, found or captured; the dynamic-dim state before
        its capture, or None when it was found; the argument leaves)."""
        args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        leaves, spec = flatten(list(args))
        with self._lock:
            entry = self._lookup(leaves, spec, gm) or self._adopt(leaves, spec, gm)
            if entry is not None:
                return entry, None, leaves
            entry, saved = self._capture_for(args, leaves, spec, gm)
        return entry, saved, leaves

    def reset(self) -> None:
        from .backend import forget
        forget(self)   # (`tj.compiler.wait` no longer reports its forgotten entries)
        with self._lock:
            self._entries.clear()
            self._flat_entries.clear()
            self._dynamic.clear()
            self._static.clear()
            self._grown.clear()
            self._fell_back = False
            self._split = None
            self._stats = _new_stats()

    def explain(self, *args, **kwargs):
        from .explain import explain
        return explain(self, *args, **kwargs)

    @property
    def entries(self) -> list:
        return list(self._entries)

    def entry_for(self, *args, **kwargs) -> Optional[Entry]:
        """The cached entry a call with these arguments runs now (grad mode included), or
        None when such a call would capture, or run eagerly."""
        args = self._bind(args, kwargs)
        gm = _gm._state.enabled
        return self._lookup(*flatten(list(args)), gm)

    def _lookup(self, leaves, spec, gm) -> Optional[Entry]:
        """The cached entry whose guard a call with these leaves passes, or None."""
        return next((e for e in list(self._entries)
                     if e.arg_spec == spec and e.guard(leaves, e.const_tensors, gm)), None)

    def __repr__(self) -> str:
        return f"<tracejit.{self._mode} {self.__name__}: {len(self._entries)} entries>"


def _new_stats() -> dict:
    return {"compiles": 0, "hits": 0, "misses": 0, "recompile_reasons": [], "eager_fallbacks": 0,
            "eager_calls": 0}


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


def compiled_function_of(obj: Any) -> Optional[CompiledFunction]:
    """The CompiledFunction behind `obj`: itself, or a compiled module's forward."""
    if isinstance(obj, CompiledFunction):
        return obj
    forward = getattr(obj, "forward", None)
    return forward if isinstance(forward, CompiledFunction) else None
