"""Autocast's state and its per-op cast policy, as PyTorch's CPU autocast lists them.

`tracejit.amp.autocast` sets the state; the public functions of ops/ carry one of three
policies (`lower`, `fp32`, `promote`) as a decorator, so eager calls, traced captures
and the functions ops call inside each other all cast at the same door:

- ``lower`` (products and convolutions): floating tensor operands are cast to the
  autocast dtype (bf16) and the op runs there, accumulating in float32;
- ``fp32`` (losses, ``prod``, ``cdist``, solvers): floating operands of a lower
  precision are cast to float32;
- ``promote`` (``cat``, ``stack``): operands are cast to their widest floating dtype.

Every other op runs in its operands' dtype, as PyTorch's CPU autocast does (softmax,
norms and reductions of a bf16 tensor give bf16; they compute in float32 inside, see
ops/bf16_eager.py). The op itself runs with autocast suspended, so what it calls is
not cast a second time. The lists are tested against torch.autocast (tests/amp/).

The state is per thread (``STATE.dtype``: None when off); `ENTERED` counts the active
contexts of all threads, so an op outside any autocast pays one list read. Compiled
functions keep the state they were captured under in their guard (jit/guards.py).
"""
from __future__ import annotations

import functools
import threading

from .. import dtypes as _dt
from ..errors import not_a_tensor

__all__ = ["STATE", "ENTERED", "current", "lower", "fp32", "promote", "POLICIES", "set_state"]


class _State(threading.local):
    dtype = None   # the autocast dtype while enabled, else None


STATE = _State()
ENTERED = [0]          # active autocast contexts, all threads together
POLICIES: dict = {}    # function name -> "lower" | "fp32" | "promote" (what tests compare)


def current():
    """The autocast dtype in force on this thread, or None."""
    return STATE.dtype if ENTERED[0] else None


def set_state(dtype) -> object:
    """Set this thread's autocast dtype (None: off); returns the previous one."""
    prev = STATE.dtype
    STATE.dtype = dtype
    return prev


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


def _policy(kind: str, retype):
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
            to = retype(dt, args, kwargs)
            args, kwargs = _cast_args(args, kwargs, to)
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


lower = _policy("lower", _to_lower)
fp32 = _policy("fp32", _to_fp32)
promote = _policy("promote", _to_widest)


def _cast(t, dt):
    return _CAST_OP(t, dt)


from ..tensor import Tensor as _Tensor  # noqa: E402
from .elementwise import cast as _CAST_OP  # noqa: E402
