"""Eager dispatch: `bind`, the one door every op goes through, and its per-signature plans.

`bind(prim, *args, **params)` records an equation under an active tracer; otherwise it
runs the primitive now: ``prim.run`` (ops/impls.py's table, then the record's numpy form)
on the operands' arrays, after the dtype promotion the record asks for, and attaches an
autograd node where gradients are needed. Large elementwise calls may run on a backend's
kernels made from the record's scalar rule (`impls.elementwise`).

Every eager op pays this module's cost, so it keeps a *plan* per primitive and operand
signature (see `_Plan`): the rule's result and casts, computed once.
"""
from __future__ import annotations

import threading
from math import copysign as _copysign

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..errors import DeviceMismatchError
from ..tensor import _INFERENCE, Tensor, _mark_inference
from .impls import elementwise as _ew, signature_call as _signature_call
from .registry import Aval, Primitive
from .promotion import NUMPY_WEAK_SCALARS, compute_dtype, compute_np, half_widened, prepare, scalar_as, scalar_aval

__all__ = ["bind", "trace_state", "trace_hooks", "tracer_entered", "tracer_exited", "scalar_aval",
           "compute_dtype", "prepare"]

class _TraceState(threading.local):
    tracer = None
    profiler = None   # tracejit.profiler's recorder while a profile records in this thread


trace_state = _TraceState()


class trace_hooks:
    """What capture (jit/) lends the ops that meet traced values, set when jit loads: ops
    never import jit, and a tracer exists only once it has loaded."""
    size_of = staticmethod(lambda t: t.__index__())      # jit/size_args.py: a Sym or an int
    assume_nonnegative = staticmethod(lambda v, what, dims=False: False)
    eager_layout = None                                    # jit/view_writes.py
    eager_pair = staticmethod(lambda a, b: None)           # jit/view_writes.py
    refuse_grad_change = staticmethod(lambda t, value: None)   # jit/side_effects.py
    alias = staticmethod(lambda out, prim, a: None)        # jit/view_writes.py
    writes_argument = staticmethod(lambda t: False)        # jit/side_effects.py
    same_value = staticmethod(lambda a, b: a is b)         # jit/view_writes.py

# How many tracers are active in all threads: while none is, `bind` skips the thread-local
# lookup of `trace_state.tracer` (~5x a module global's). Nonzero only
# means "look": the thread-local stays the truth.
_tracers_active = 0
_tracers_lock = threading.Lock()


def tracer_entered() -> None:
    global _tracers_active
    with _tracers_lock:
        _tracers_active += 1


def tracer_exited() -> None:
    global _tracers_active
    with _tracers_lock:
        _tracers_active -= 1


# ---------------------------------------------------------------- eager dispatch
# Every eager op comes through `_eager`, so its cost is the per-op overhead users see. The
# rule and promotion depend only on the operands' (shape, dtype) / scalar types, the params
# and the default float dtype, so `_eager` keeps per primitive a *plan* for each signature:
# output dtype and shape, and each operand's cast. A new signature takes the general path
# once (which raises the record's errors; failures are never cached).

_NO_PARAMS: dict = {}  # the params of a call without any (shared: nothing writes it)
_MAX_PLANS = 512  # per primitive; a program meets few signatures, a fuzzer many


class _Plan:
    __slots__ = ("default", "casts", "cast_at", "out_dtype", "out_np", "out_shape", "diff", "compute_np",
                 "big", "meta", "fn", "lean", "view")

    def __init__(self, default, casts, out_dtype, out_shape, diff, compute_np, big, meta, fn):
        self.default = default      # the default float dtype the plan was made under
        self.casts = casts          # per operand: numpy dtype to cast it to, or None
        self.cast_at = tuple(i for i, c in enumerate(casts) if c is not None)  # usually empty
        self.out_dtype = out_dtype
        self.out_np = out_dtype.np
        self.out_shape = out_shape
        self.diff = diff            # can the output need a gradient?
        self.compute_np = compute_np
        self.big = big              # run through the backend's elementwise kernels (impls.elementwise)?
        self.meta = meta            # per operand (shape, dtype) or None: autograd's node._meta
        self.fn = fn                # the impl's numpy call on the cast arrays, or None
        # `fn` once a call through this plan has shown it is all the call needs (no cast,
        # no kernel, result already an array of `out_np`); set by that call (`_lean`),
        # never guessed. The other fields are then not read at all.
        self.lean = None
        # does the result alias operand 0 (`_share_memory`)? ``prim.is_view``, or its
        # ``view_if(params)``, which the params in the plan's key fix
        self.view = False


def bind(prim: Primitive, *args, **params):
    """Run `prim` on `args` (Tensors, or Python scalars for elementwise ops)."""
    if _tracers_active:
        tracer = trace_state.tracer
        if tracer is not None:
            return tracer.record(prim, args, params)
        if trace_state.profiler is not None:
            return trace_state.profiler.op(prim, args, params)
    n = len(args)
    if n == 1:
        a = args[0]
        plans = prim.plans
        if plans is None or not isinstance(a, Tensor) or a.device is not CPU:
            return _eager(prim, args, params)
        # One CPU tensor operand, with or without params: the plan keyed by (shape, dtype,
        # params), checked inline here (one Python call less per op). A -0.0 param takes
        # the general path: as a key it equals 0.
        x = a._data
        if params:
            for v in params.values():
                t = type(v)
                if t is tuple:
                    if _PLAIN.get(id(v)) is not v:
                        for e in v:
                            if type(e) not in _PARAM_TYPES and not _plain_tuple(e):
                                return _eager_general(prim, (a,), params, None)
                elif t not in _PARAM_TYPES or (t is float and v == 0.0 and _copysign(1.0, v) < 0.0):
                    return _eager_general(prim, (a,), params, None)
            key = (x.shape, a.dtype, tuple(params.items()))
        else:
            key = (x.shape, a.dtype)
        plan = plans.get(key)
        if plan is None or plan.default is not _dt._default_float:
            return _eager_general(prim, (a,), params, key)
        fn = plan.lean
        if fn is not None:
            out = fn(x)
        else:
            c0 = plan.casts[0]
            if c0 is not None:
                x = x.astype(c0)
            out = None
            if plan.big:
                out = _ew.run(prim, (x,), params, plan.compute_np, plan.out_np, plan.out_shape)
            if out is None:
                fn = plan.fn  # the impl's numpy call for this signature (a ufunc, `extra["fast"]`)
                if fn is not None:
                    out = fn(x)
                    if c0 is None and not plan.big:
                        _lean(plan, fn, out)
                else:
                    out = prim.run(np, x, **params)
            onp = plan.out_np
            if type(out) is not np.ndarray or out.dtype is not onp:
                out = np.asarray(out, dtype=onp)
        # (Tensor._wrap(out, plan.out_dtype, CPU) written out: one Python call less per op)
        result = _new_tensor(Tensor)
        result._data = out
        result.dtype = plan.out_dtype
        result.device = CPU
        result._requires_grad = False
        result.grad_fn = None
        if plan.view:   # (`_share_memory` written out)
            result._vbox = a._vbox
            base = a._base
            result._base = a if base is None else base
        else:
            result._vbox = [0]
            result._base = None
        if _INFERENCE:
            _mark_inference(result)
        if a._requires_grad and plan.diff and (not _GRAD_OFF or _grad_state.enabled):
            record_unary(prim, a, params, result, plan.meta)
        return result
    binary = prim.binary
    if n != 2 or binary is None:
        return _eager(prim, args, params)
    return binary(args[0], args[1], params)


def _lean(plan: _Plan, fn, out) -> None:
    """Make `fn` the plan's whole call (`_Plan.lean`) when its result `out` (of a call with
    no cast and no kernel) is already an array of the plan's dtype; that depends on the
    signature alone, not on the values."""
    if type(out) is np.ndarray and out.dtype is plan.out_np:
        plan.lean = fn


_new_tensor = object.__new__


def _make_binary(prim: Primitive, miss=None):
    """The plan fast path of `prim` for two operands. A closure over the record's plans;
    the Tensor operators (``a * b``) are such closures themselves (tensor_operators.py),
    one Python call less per operator. Anything unusual (another device, a new signature,
    a changed default dtype, a non-constant param) goes to ``miss(a, b, key, params)``
    (the general path when None)."""
    plans = prim.plans
    if miss is None:
        def miss(a, b, key, params):
            return _eager_general(prim, (a, b), params, key)

    def binary(a, b, params=_NO_PARAMS):
        if _tracers_active:
            tracer = trace_state.tracer
            if tracer is not None:
                return tracer.record(prim, (a, b), params if params else {})
            if trace_state.profiler is not None:
                return trace_state.profiler.op(prim, (a, b), params if params else {})
        if isinstance(a, Tensor):
            x = a._data
            if isinstance(b, Tensor):
                y = b._data
                key = (x.shape, a.dtype, y.shape, b.dtype)
                grad = a._requires_grad or b._requires_grad
                if b.device is not CPU:
                    key = None
            else:
                y = b
                key = (x.shape, a.dtype, type(b))
                grad = a._requires_grad
            if a.device is not CPU:
                key = None
        elif isinstance(b, Tensor) and b.device is CPU:
            x = a
            y = b._data
            key = (type(a), y.shape, b.dtype)
            grad = b._requires_grad
        else:
            key = None
        if params and key is not None:
            pkey = _param_key(params)  # (the key `_eager` makes: operands, then params)
            key = None if pkey is None else key + pkey
        plan = plans.get(key)  # (None is never a key)
        if plan is None or plan.default is not _dt._default_float:
            return miss(a, b, key, params)
        fn = plan.lean
        if fn is not None:
            out = fn(x, y)
        else:
            c0, c1 = plan.casts
            if c0 is not None:
                x = x.astype(c0) if x is not a else scalar_as(x, c0)
            if c1 is not None:
                y = y.astype(c1) if y is not b else scalar_as(y, c1)
            out = None
            if plan.big:
                out = _ew.run(prim, (x, y), params, plan.compute_np, plan.out_np, plan.out_shape)
            if out is None:
                fn = plan.fn  # the impl's numpy call for this signature (a ufunc, `extra["fast"]`)
                if fn is not None:
                    out = fn(x, y)
                    if c0 is None and c1 is None and not plan.big:
                        _lean(plan, fn, out)
                elif params:
                    out = prim.run(np, x, y, **params)
                else:
                    out = prim.run(np, x, y)
            onp = plan.out_np
            if type(out) is not np.ndarray or out.dtype is not onp:
                out = np.asarray(out, dtype=onp)
        # (Tensor._wrap(out, plan.out_dtype, CPU) written out: one Python call less per op)
        result = _new_tensor(Tensor)
        result._data = out
        result.dtype = plan.out_dtype
        result.device = CPU
        result._requires_grad = False
        result.grad_fn = None
        result._vbox = [0]
        result._base = None
        if _INFERENCE:
            _mark_inference(result)
        if grad and plan.diff and (not _GRAD_OFF or _grad_state.enabled):
            record_binary(prim, a, b, params, result, plan.meta)
        return result
    binary.__name__ = binary.__qualname__ = prim.name
    return binary


# (a set: every use asks whether a value's exact type is one of these; a tuple's `in`
# compares the types in turn: ~3x the set's time for a DType or None)
_PARAM_TYPES = frozenset((int, float, bool, str, type(None), _dt.DType))


def _plain_tuple(t) -> bool:
    """Whether `t` is a tuple of plain constants: the items of an index spec (getitem's
    ``spec=(("i", 1), ("s", 0, None, 2))``), so basic indexing has a plan too."""
    if type(t) is not tuple:
        return False
    for x in t:
        if type(x) not in _PARAM_TYPES:
            return False
    return True


# Tuple params known plain, by identity (each kept alive, so its id stays its own): the
# params the shape functions and indexing keep per shape and arguments (`remember_plain`),
# passed again as the same tuples each call; checking an index spec's items cost a third
# of a view's dispatch.
_PLAIN: dict = {}


def remember_plain(v):
    """Let `bind` take the tuple param `v` without checking its items on each call: for
    params an op keeps and passes again as the same object. Ignored unless plain. Returns v."""
    if type(v) is tuple and all([type(x) in _PARAM_TYPES or _plain_tuple(x) for x in v]):
        if len(_PLAIN) >= _MAX_PLANS * 32:
            _PLAIN.clear()
        _PLAIN[id(v)] = v
    return v


def _param_key(params):
    """The params as part of a plan key, or None when some value is not a plain constant
    or a tuple of those (a key must neither keep arrays alive nor compare tensors). A -0.0
    is not plain: it equals 0 as a key, and a plan's fast call may depend on the sign."""
    for v in params.values():
        t = type(v)
        if t is tuple:
            if _PLAIN.get(id(v)) is not v:
                for x in v:
                    if type(x) not in _PARAM_TYPES and not _plain_tuple(x):
                        return None
        elif t not in _PARAM_TYPES or (t is float and v == 0.0 and _copysign(1.0, v) < 0.0):
            return None
    return tuple(params.items())


def _eager(prim: Primitive, args, params):
    """Eager run of `prim`: through its plan when one fits, else the general path. The
    plan's key: each operand's (shape, dtype), or a number's type, then the params."""
    plans = prim.plans
    if plans is None:
        return _eager_general(prim, args, params, None)
    key = []
    arrays = []
    grad = False
    for a in args:
        if isinstance(a, Tensor):
            if a.device is not CPU:
                return _eager_general(prim, args, params, None)
            d = a._data
            key.append(d.shape)
            key.append(a.dtype)
            arrays.append(d)
            if a._requires_grad:
                grad = True
        else:
            key.append(type(a))
            arrays.append(a)
    if params:
        pkey = _param_key(params)
        if pkey is None:
            return _eager_general(prim, args, params, None)
        key += pkey
    key = tuple(key)
    plan = plans.get(key)
    if plan is None or plan.default is not _dt._default_float:
        return _eager_general(prim, args, params, key)
    fn = plan.lean
    if fn is not None:
        out = fn(*arrays)
    else:
        for i in plan.cast_at:
            c = plan.casts[i]
            arrays[i] = arrays[i].astype(c) if isinstance(args[i], Tensor) else scalar_as(arrays[i], c)
        out = None
        if plan.big:
            out = _ew.run(prim, arrays, params, plan.compute_np, plan.out_np, plan.out_shape)
        if out is None:
            fn = plan.fn  # the signature's call, as the one- and two-operand paths make
            if fn is not None:
                out = fn(*arrays)
                if not plan.cast_at and not plan.big:
                    _lean(plan, fn, out)
            else:
                out = prim.run(np, *arrays, **params)
        onp = plan.out_np
        if type(out) is not np.ndarray or out.dtype is not onp:
            out = np.asarray(out, dtype=onp)
    result = Tensor._wrap(out, plan.out_dtype, CPU)
    if plan.view:
        _share_memory(result, args[0])
    if grad and plan.diff and (not _GRAD_OFF or _grad_state.enabled):
        make_prim_node(prim, args, params, result, plan.meta)
    return result


def _share_memory(result, src) -> None:
    # (written out in `bind`'s unary fast path too, a call less per op: a new field goes into both)
    result._vbox = src._vbox  # a view shares memory, so it shares the version counter
    base = src._base
    result._base = src if base is None else base


def _eager_general(prim: Primitive, args, params, key):
    if _cx.involves(prim, args, params):   # (complex signatures keep no plan either)
        return _cx.run(prim, args, params)
    if _bf16.involves(args, params):   # (bf16 signatures keep no plan: each call comes here)
        key = None
        if not _bf16.on_words(prim, args, params) and not _bf16.native(prim, args, params):
            return _bf16.run(prim, args, params)
    avals = []
    dev = None
    for a in args:
        if isinstance(a, Tensor):
            d = a.device
            if dev is None:
                dev = d
            elif d is not dev:
                raise DeviceMismatchError(
                    f"{prim.name}: expected all tensors on the same device, got {dev} and {d}")
            avals.append(Aval(a._data.shape, a.dtype, d))
        else:
            avals.append(scalar_aval(a, prim))
    if dev is None:
        dev = params.get("device") or CPU
    out_aval, arrays = prepare(prim, args, avals, params)
    out = None
    if key is not None and "device" not in params:   # (a plan's result stays on the CPU)
        plan = prim.plans[key] = _make_plan(prim, args, avals, out_aval, params)
        if len(prim.plans) > _MAX_PLANS:
            prim.plans.clear()
        if plan.big:
            out = _ew.run(prim, arrays, params, plan.compute_np, plan.out_np, plan.out_shape)
    xp = np if dev is CPU else _xp(dev)
    if out is None:
        out = prim.run(xp, *arrays, **params)
    odt = out_aval.dtype
    odn = odt.np
    # the result lives on the inputs' device, or where a `device` parameter sends it
    odev = params.get("device") or dev
    if odev is not dev:
        xp = np if odev is CPU else _xp(odev)
    if type(out) is not xp.ndarray or (out.dtype is not odn and out.dtype != odn):
        out = xp.asarray(out, dtype=odt.np)
    result = Tensor._wrap(out, odt, odev)
    if prim.is_view or (prim.view_if is not None and prim.view_if(params)):
        _share_memory(result, args[0])
    if prim.vjp is not None and odt.is_floating_point and (not _GRAD_OFF or _grad_state.enabled):
        for a in args:
            if isinstance(a, Tensor) and a._requires_grad:
                make_prim_node(prim, args, params, result)
                break
    return result


def _make_plan(prim: Primitive, args, avals, out_aval, params=None) -> _Plan:
    """The plan of one signature, from what `prepare` and the rule just computed."""
    casts = []
    odt = out_aval.dtype
    cdt = avals[0].dtype if avals else odt  # promoting ops: every operand's dtype by now
    cnp = compute_np(prim, cdt)
    for a, av in zip(args, avals):
        cd = cnp if prim.promote else av.dtype.np
        if not prim.promote:   # (float16 of a record that widens it: float32, see `prepare`)
            casts.append(half_widened(prim, a.dtype) if isinstance(a, Tensor) else None)
        elif isinstance(a, Tensor):
            casts.append(None if a._data.dtype == cd else cd)
        elif type(a) is float and cd.kind == "f":
            # numpy (>= 2) computes `f32_array * 2.0` in float32, as a cast scalar would
            casts.append(None if NUMPY_WEAK_SCALARS else cd)
        else:
            casts.append(cd)  # ints may be out of range: _scalar_as wraps them as PyTorch does
    operands = [a._data.shape if isinstance(a, Tensor) else None for a in args]
    big = _ew.eligible(prim, operands, cdt, odt, out_aval.shape, params)
    meta = tuple((a._data.shape, a.dtype) if isinstance(a, Tensor) else None for a in args)
    fn = _signature_call(prim, tuple(operands), cnp, params or _NO_PARAMS)   # (as compiled plans')
    plan = _Plan(_dt._default_float, tuple(casts), odt, out_aval.shape,
                 prim.vjp is not None and odt.is_floating_point, cnp, big, meta, fn)
    plan.view = prim.is_view or (prim.view_if is not None and bool(prim.view_if(params or _NO_PARAMS)))
    return plan


def _xp(dev):
    from ..device import array_module
    return array_module(dev)


def eager_layout(t):
    """`t`'s array, or for a tracer one with the strides it would have eagerly
    (jit/view_writes.py), for the ops that ask for strides (`view`, `stride`)."""
    return t._data if t._data is not None else trace_hooks.eager_layout(t)


# The import cycle tensor -> ops -> autograd -> tensor is closed by tail imports: autograd
# is imported here after every name the ops modules take from this module is defined,
# because autograd's engine imports ops in turn.
from ..autograd.grad_mode import OFF as _GRAD_OFF, _state as _grad_state  # noqa: E402
from ..autograd.node import make_prim_node, record_binary, record_unary  # noqa: E402

# The eager paths of complex and bf16 operands (complex_ops.py, bf16_eager.py): they are built
# on the ops modules, which import this one, so ops/__init__.py hands them over once loaded.
_cx = _bf16 = None


def take_operand_paths(complex_path, bf16_path) -> None:
    global _cx, _bf16
    _cx, _bf16 = complex_path, bf16_path


def refuse_effect(what: str, owner=None) -> None:
    """Raise TraceError under a tracer: `what` (a method of `owner`'s class, if given)
    changes concrete state (a parameter's array, a gradient) directly, which a replay of
    the captured graph would not repeat."""
    if trace_state.tracer is not None:
        from ..errors import TraceError
        if owner is not None:
            what = f"{type(owner).__name__}.{what}"
        raise TraceError(f"{what} outside the graph, so it cannot be traced (a compiled call would "
                         f"skip it); call it outside the compiled function or use tracejit.eager")


def refuse_tracing(op: str, reads: str) -> None:
    """Raise TraceError under a tracer: `op` reads `reads` as values (index arrays, lengths)
    to build constants, which a captured graph would freeze at the traced call's values."""
    if trace_state.tracer is not None:
        from ..errors import TraceError
        raise TraceError(f"{op} reads {reads} as values, so it cannot be traced; call it outside "
                         f"the compiled function or use tracejit.eager")
