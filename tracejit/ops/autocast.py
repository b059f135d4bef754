"""Autocast's state and its per-op cast policy, as PyTorch's CPU autocast lists them.

`tracejit.amp.autocast` sets the state; the public functions of ops/ carry one of three
policies (`lower`, `fp32`, `promote`) as a decorator, so eager calls, traced captures
and the functions ops call inside each other all cast at the same door:

- ``lower`` (products and convolutions): floating tensor operands are cast to the
  autocast dtype (bf16) and the op runs there, accumulating in float32;
  ``lower_widened`` marks those that compute in float32 on the bf16 operands' values
  where bf16 products do (no bf16 units), rounding once (linear, matmul, mm, bmm,
  conv2d, attention): a float32 operand is rounded to bf16 values in one pass
  (``round_bf16``) rather than cast to words and widened again, the op runs in float32
  and its result is cast to bf16 once;
- ``fp32`` (losses, ``prod``, ``cdist``, solvers): floating operands of a lower
  precision are cast to float32;
- ``promote`` (``cat``, ``stack``): operands are cast to their widest floating dtype;
- ``unlisted`` (``mv``, ``dot``, ``interpolate``): on no list, yet built here on listed
  products: the operands keep their dtype and the op's insides run with autocast off,
  as PyTorch's do, so a float32 ``mv`` gives float32.

Every other op runs in its operands' dtype, as PyTorch's CPU autocast does (softmax,
norms and reductions of a bf16 tensor give bf16; they compute in float32 inside, see
ops/bf16_eager.py). The op itself runs with autocast suspended, so what it calls is
not cast a second time. The lists are tested against torch.autocast (tests/amp/).

The state is per thread (``STATE.dtype``: None when off); `ENTERED` counts the active
contexts of all threads, so an op outside any autocast pays one list read. As PyTorch's,
the casts of the weights (float32 leaves that require gradients) are cached while the
thread's outermost context is open (``cache_enabled``, `_cached`); beyond PyTorch's, their
values outlive the context while the weight is unchanged (`_Kept`). Compiled functions
keep the state they were captured under in their guard (jit/guards.py).
"""
from __future__ import annotations

import functools
import threading
import weakref

from .. import dtypes as _dt
from ..errors import not_a_tensor

__all__ = ["STATE", "ENTERED", "current", "lower", "lower_widened", "fp32", "promote", "unlisted", "POLICIES",
           "set_state", "enter", "leave"]


class _State(threading.local):
    dtype = None       # the autocast dtype while enabled, else None
    depth = 0          # this thread's open contexts
    cache_on = True    # the innermost context's cache_enabled
    casts = None       # the weights' casts: (id, target, grad mode) -> (tensor, data, version, cast)
    kept = None        # the casts' values across contexts: (id, target) -> _Kept


STATE = _State()
ENTERED = [0]          # active autocast contexts, all threads together
POLICIES: dict = {}    # function name -> "lower" | "fp32" | "promote" | "unlisted" (what tests compare)


def current():
    """The autocast dtype in force on this thread, or None."""
    return STATE.dtype if ENTERED[0] else None


def set_state(dtype) -> object:
    """Set this thread's autocast dtype (None: off); returns the previous one."""
    prev = STATE.dtype
    STATE.dtype = dtype
    return prev


def enter(dtype, cache_enabled: bool = True) -> tuple:
    """Open a context on this thread (`tracejit.amp.autocast`); returns what `leave` restores."""
    st = STATE
    prev = (st.dtype, st.cache_on)
    st.dtype, st.cache_on = dtype, bool(cache_enabled)
    st.depth += 1
    return prev


def leave(prev: tuple) -> None:
    """Close the context `enter` opened; the outermost one drops the cached casts."""
    st = STATE
    st.dtype, st.cache_on = prev
    st.depth -= 1
    if st.depth <= 0:
        st.depth, st.casts = 0, None


def _cacheable(t) -> bool:
    """Whether `t`'s casts are kept (see the top): a float32 leaf that requires gradients
    and owns its memory, while the innermost context caches."""
    return (t.dtype is _dt.float32 and t._requires_grad and t.grad_fn is None and t._base is None
            and t._data is not None and STATE.cache_on)


def _cached(to, target):
    """`to` with the weights' casts kept (`_cacheable`). While a function is captured, a
    cast is kept for that capture alone (the tracer is part of the key and kept with the
    cast), so its graph, like PyTorch's, casts a weight used twice once; eager casts also
    keep their values for later contexts (`_Kept`)."""
    def cast(t):
        if not _cacheable(t):
            return to(t)
        tracer = None
        if _eager._tracers_active:
            tracer = _eager.trace_state.tracer
            if tracer is None:
                return to(t)
        casts = STATE.casts
        if casts is None:
            casts = STATE.casts = {}
        key = (id(t), target, _grad_mode.is_grad_enabled(), id(tracer))
        hit = casts.get(key)
        if (hit is not None and hit[0] is t and hit[1] is t._data and hit[2] == t._vbox[0] and hit[4] is tracer
                and (hit[3].grad_fn is None or not hit[3].grad_fn._freed)):   # (a backward ran through it)
            return hit[3]
        out = to(t) if tracer is not None else _kept_cast(t, target, to)
        casts[key] = (t, t._data, t._vbox[0], out, tracer)
        return out
    return cast


class _Kept:
    """One weight's cast to one dtype, kept across contexts: the weight (weakly), its
    memory and version when cast, the values, and the version counter of the tensor last
    handed out over them with its count then (an in-place change to that tensor makes the
    values stale too). Nothing here holds the weight: a cast's autograd node would."""
    __slots__ = ("ref", "data", "version", "values", "given", "given_version")

    def fresh(self, t) -> bool:
        # the whole counter: slot 1, where present, counts writes through ``.data`` aliases
        return (self.ref() is t and self.data is t._data and self.version == tuple(t._vbox)
                and self.given[0] == self.given_version)


def _kept_cast(t, target, to):
    """``to(t)``, weight `t`'s cast to `target`, from the values a previous context kept
    where they are fresh (`_Kept`): a new tensor over them with the cast's own autograd
    node, as ``to`` would give; else cast now and keep the values."""
    kept = STATE.kept
    if kept is None:
        kept = STATE.kept = {}
    key = (id(t), target)
    entry = kept.get(key)
    if entry is not None and entry.fresh(t):
        out = _Tensor._wrap(entry.values, target, t.device)
        if t._requires_grad and _grad_mode.is_grad_enabled():
            from ..autograd.node import make_prim_node   # (autograd imports this module)
            make_prim_node(_CAST_PRIM, (t,), {"dtype": target}, out)
    else:
        out = to(t)
        if out.dtype is not target or out._data is t._data or type(out._data) is not type(t._data):
            return out
        if entry is None:
            entry = _Kept()
            entry.ref = weakref.ref(t, lambda _, kept=kept, key=key: kept.pop(key, None))
            kept[key] = entry
        entry.data, entry.version, entry.values = t._data, tuple(t._vbox), out._data
    entry.given, entry.given_version = out._vbox, out._vbox[0]
    return out


def _is_float_tensor(a) -> bool:
    return isinstance(a, _Tensor) and a.dtype.is_floating_point


def _cast_args(args, kwargs, to):
    """Positional and keyword operands (and tensors in lists/tuples) through `to(t)`."""
    def one(a):
        if _is_float_tensor(a):
            return to(a)
        if isinstance(a, (list, tuple)) and any(_is_float_tensor(x) for x in a):
            return type(a)(to(x) if _is_float_tensor(x) else x for x in a)
        return a
    return [one(a) for a in args], {k: one(v) for k, v in kwargs.items()}


def _policy(kind: str, retype, widens: bool = False):
    def decorate(fn):
        POLICIES[fn.__name__] = kind

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if not ENTERED[0]:
                try:
                    return fn(*args, **kwargs)
                except Exception as exc:
                    err = not_a_tensor(fn.__name__, args[0], exc) if args else None
                    if err is not None:
                        raise err from None
                    raise
            dt = STATE.dtype
            if dt is None:
                return fn(*args, **kwargs)
            if widens and dt is _dt.bfloat16 and _widens(args, kwargs):
                return _in_float32(fn, dt, args, kwargs)
            to = retype(dt, args, kwargs)
            args, kwargs = _cast_args(args, kwargs, _cached(to, dt) if kind == "lower" else to)
            STATE.dtype = None      # the op's insides are not cast again
            try:
                return fn(*args, **kwargs)
            finally:
                STATE.dtype = dt
        wrapped.autocast = kind
        return wrapped
    return decorate


def _to_lower(dt, args, kwargs):
    return lambda t: t if t.dtype is dt or t.dtype is _dt.float64 else _cast(t, dt)


def _to_fp32(dt, args, kwargs):
    return lambda t: _cast(t, _dt.float32) if t.dtype is _dt.bfloat16 or t.dtype is _dt.float16 else t


def _to_widest(dt, args, kwargs):
    widest = None
    for a in list(args) + list(kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if _is_float_tensor(t):
                widest = t.dtype if widest is None else _dt.promote_types(widest, t.dtype)
    return lambda t: t if widest is None or t.dtype is widest else _cast(t, widest)


def _to_same(dt, args, kwargs):
    return lambda t: t


def _widens(args, kwargs) -> bool:
    """Whether a ``lower_widened`` call runs in float32: bf16 products compute in float32
    here and its floating operands are float32 or bf16 (a float64 one stays as ``lower``
    leaves it, and the op then runs as it would)."""
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)) or getattr(a, "is_sparse", False):
            return False
        if _is_float_tensor(a) and a.dtype is not _dt.float32 and a.dtype is not _dt.bfloat16:
            return False
    return _bf16_eager.widens_products()


def _in_float32(fn, dt, args, kwargs):
    """`fn` on its operands' bf16 values in float32 (float32 ones rounded, bf16 ones
    widened), its floating result cast to bf16 once. A weight's bf16 words are cached as
    the ``lower`` policy's are and widened for each use: each use's gradient is rounded to
    bf16 and the uses' gradients are summed in bf16 (the autograd engine's, or the
    compiled backward's, bf16 add), as under PyTorch, whose products give bf16 gradients."""
    words = _cached(lambda t: _cast(t, dt), dt)

    def to(t):
        if t.dtype is not _dt.float32:
            return _cast(t, _dt.float32)
        if _cacheable(t):
            return _cast(words(t), _dt.float32)
        return _bf16_eager.round_bf16(t)
    args, kwargs = _cast_args(args, kwargs, to)
    STATE.dtype = None
    try:
        out = fn(*args, **kwargs)
    finally:
        STATE.dtype = dt
    return _cast(out, dt) if _is_float_tensor(out) else out


lower = _policy("lower", _to_lower)
lower_widened = _policy("lower", _to_lower, widens=True)
fp32 = _policy("fp32", _to_fp32)
promote = _policy("promote", _to_widest)
unlisted = _policy("unlisted", _to_same)


def _cast(t, dt):
    return _CAST_OP(t, dt)


from ..tensor import Tensor as _Tensor  # noqa: E402
from .elementwise import cast as _CAST_OP  # noqa: E402
from . import bf16_eager as _bf16_eager  # noqa: E402
from . import eager as _eager  # noqa: E402
from ..autograd import grad_mode as _grad_mode  # noqa: E402
from .elementwise_logic import CAST as _CAST_PRIM  # noqa: E402
