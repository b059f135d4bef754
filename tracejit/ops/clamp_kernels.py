"""clamp's eager numpy form in one pass: ``numpy.maximum(bound, x)`` where it is exactly
``where(x < bound, bound, x)``.

Why: clamp's result is defined as that select (kept elements keep their bits: -0.0
stays -0.0 at a +0 bound, nan stays nan with its payload). numpy has no one-call select
with a scalar: ``numpy.where`` branches per element (~2 ns each on a random mask), and
the branch-free bit mask clamp used (elementwise._select_or_zero: a comparison, a mask
widened to integers, a bitwise and) is three passes plus several ufunc calls, 5-8 us
for a 16-element ReLU (numpy's own ``maximum`` on it: 0.7 us; PyTorch's clamp 2.9 us)
and 12 us on a 64x100 one (PyTorch 4.7 us).

``maximum(b, x)`` with the bound FIRST is that select on x86 numpy: its SIMD loops return
the second operand when the two compare equal (``+0`` vs ``-0.0``) or it is nan (as the
``maxps``/``minps`` instructions do), and its scalar loop does the same. That is how the
installed numpy behaves, not something numpy documents, so it is checked once per dtype
(`_keeps_operand`: tails of each kind, unrolled bodies, unaligned starts, both
signs of zero, both signs of nan, scalar and array bounds); where the check fails, clamp keeps its select.
The bound must be exactly representable in the array's dtype (a float32 array and a
bound of 0.1 compare through the rounded bound in one form and not necessarily the
other) and not nan (``maximum`` would return the nan bound, the select never does).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["clamp_numpy", "clamp_fast"]

_FLOATS = (np.float16, np.float32, np.float64)
_checked: dict = {}   # numpy dtype -> bool: maximum/minimum(bound, x) return x on ties and nan


def clamp_numpy(a: np.ndarray, min=None, max=None):
    """``clamp(a, min, max)`` for a float numpy array and Python-number bounds, in one
    ``maximum`` (and/or ``minimum``) call, bitwise the select form; None when that is not
    known to be exact here (the caller's select form runs)."""
    bounds = _exact_bounds(a.dtype, min, max)
    if bounds is None:
        return None
    lo, hi = bounds
    out = a
    if lo is not None:
        out = np.maximum(_operand(lo, a), out)
    if hi is not None:
        out = np.minimum(_operand(hi, out), out)
    return out


def clamp_fast(shape, dt, min=None, max=None):
    """`clamp_numpy` decided once for a (shape, dtype, bounds) signature (the dispatch
    plan's numpy call, registry ``extra["fast"]``): a function of the array alone making
    the same ``maximum``/``minimum`` call with the same bound operand, or None where
    `clamp_numpy` would not apply. The bound's kept array view fits only a C-contiguous
    operand, which a plan's key (shape and dtype) does not tell: other layouts take the
    scalar bound, as `_operand` gives them."""
    if min is None and max is None:
        return None          # no bound: the impl's general path (it returns the operand)
    bounds = _exact_bounds(dt, min, max)
    if bounds is None:
        return None
    lo, hi = bounds
    if lo is not None and hi is not None:
        return lambda x: clamp_numpy(x, min, max)   # two calls: the general form
    bound, select = (lo, np.maximum) if hi is None else (hi, np.minimum)
    n = math.prod(shape)
    view = _bound_view(bound, shape, dt, n) if _ARRAY_BOUND_MIN <= n <= _ARRAY_BOUND_MAX else None
    if view is None:
        return lambda x: select(bound, x)
    return lambda x: select(view if x.flags.c_contiguous else bound, x)


def _exact_bounds(dt, min, max):
    """(lo, hi): the bounds as scalars of dtype `dt` (None where not given) when clamp's
    one-call form is exact for them, else None."""
    if dt.type not in _FLOATS or not (_checked.get(dt) or _check(dt)):
        return None
    lo = hi = None
    if min is not None:
        lo = _exact(dt, min)
        if lo is None:
            return None
    if max is not None:
        hi = _exact(dt, max)
        if hi is None:
            return None
    return lo, hi


# numpy's maximum/minimum with a scalar operand run a scalar loop (5.8 us over 6400
# float32 here) where two arrays run its SIMD loop (2.3 us): mid-sized arrays take the
# bound as a read-only array of it (views of one kept buffer per dtype and bound).
_ARRAY_BOUND_MIN = 256
_ARRAY_BOUND_MAX = 1 << 16
_bound_arrays: dict = {}
_MAX_BOUND_ARRAYS = 8


def _operand(v, x):
    """The bound `v` as maximum's first operand against `x`: a same-shaped read-only view
    of a kept array of v for mid-sized C-contiguous `x` (kept per shape too: a training
    loop meets a few), else the scalar itself."""
    n = x.size
    if n < _ARRAY_BOUND_MIN or n > _ARRAY_BOUND_MAX or not x.flags.c_contiguous:
        return v
    view = _bound_view(v, x.shape, x.dtype, n)
    return v if view is None else view


def _bound_view(v, shape, dtype, n):
    """A read-only array of `v` of this shape, `n` elements (a view of a kept buffer), or
    None once `_MAX_BOUND_ARRAYS` other bounds have buffers: the first ones are kept for
    good (dispatch plans hold their views, `clamp_fast`), so at most 8 x 512 KiB; a bound
    without one is passed as a scalar (the same result, numpy's slower scalar loop)."""
    bits = v.tobytes()   # +0.0 and -0.0 are different bounds
    key = (shape, dtype, bits)
    view = _bound_views.get(key)
    if view is None:
        buf = _bound_arrays.get((dtype, bits))
        if buf is None:
            if len(_bound_arrays) >= _MAX_BOUND_ARRAYS:
                return None
            buf = np.full(_ARRAY_BOUND_MAX, v)
            buf.flags.writeable = False
            _bound_arrays[(dtype, bits)] = buf
        if len(_bound_views) >= 256:
            _bound_views.clear()
        view = _bound_views[key] = buf[:n].reshape(shape)
    return view


_bound_views: dict = {}


def _exact(dt, bound):
    """The bound as a scalar of dtype `dt` when that is the same number and not nan
    (compared as Python numbers: numpy would compare through the rounded value)."""
    t = type(bound)
    if t is int:
        if not -_INT_EXACT < bound < _INT_EXACT:   # (no overflow in the cast below)
            return None
    elif t is float:
        if not -_FLOAT_MAX[dt.type] <= bound <= _FLOAT_MAX[dt.type] and bound - bound == 0.0:
            return None   # finite beyond the dtype's range (the cast would overflow)
    else:
        return None
    v = dt.type(bound)
    return v if float(v) == bound else None   # (False for a nan bound)


_INT_EXACT = 1 << 53
_FLOAT_MAX = {t: float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)}


def _check(dt) -> bool:
    _checked[dt] = ok = _keeps_operand(dt)
    return ok


def _keeps_operand(dt) -> bool:
    """Whether ``maximum(b, x)`` / ``minimum(b, x)``, b a scalar or an array, give x for x
    equal to b (either sign of zero) and for nan x (either sign), and b where x is beyond
    it, at lengths and start offsets numpy's loops treat differently (vector tails,
    unrolled bodies, unaligned starts). ~1 ms, once per dtype."""
    t = dt.type
    ity = _INT[dt.itemsize]
    lanes = 64 // dt.itemsize
    pattern = [t(-0.0), t(0), t(math.nan), -t(math.nan), t(-1), t(1), t(2.5)]
    base = np.array(pattern * (1040 // len(pattern) + 2), dt)
    # (a few tail lengths of each kind: the loops' tails are one code path each; the first
    # clamp of a dtype pays this, so it is kept to ~1 ms)
    sizes = (1, 2, 3, lanes - 1, lanes + 3, 2 * lanes + 5, 1031)
    with np.errstate(all="ignore"):
        for b in (t(0), t(-0.0)):
            for fn, beyond in ((np.maximum, np.less), (np.minimum, np.greater)):
                for n in sizes:
                    for off in (0, 1):
                        x = base[off:off + n]
                        want = np.where(beyond(x, b), b, x).view(ity)
                        for bb in (b, np.full(n, b, dt)):
                            if not np.array_equal(fn(bb, x).view(ity), want):
                                return False
    return True


_INT = {2: np.int16, 4: np.int32, 8: np.int64}
