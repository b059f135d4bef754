"""Reduction primitives (sum, amax, amin, prod, argmax, argmin) and the composites built on them."""
from __future__ import annotations

import builtins
import functools
import math
from collections import namedtuple
from operator import methodcaller

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled
from ..errors import ArgumentError, DTypeError, IndexRangeError
from ..shapes import normalize_dims, normalize_dim
from .elementwise import abs as _abs, cast, eq, gt, logical_not, maximum, ne, minimum, mul, pow as _pow, sqrt, where
from ..tensor import Tensor
from .registry import Aval, defprim, shift_dims
from .eager import bind, remember_plain, trace_state
from .elementwise_logic import NONZERO_INDICATOR
from .opmath import HALF, as_input, in_opmath
from .shape import EXPAND, RESHAPE, clone, expand, flip, reshape, squeeze
from .gather_prim import GATHER
from . import autocast as _autocast
from .dtype_checks import takes
from .ufunc_columns import columns_sum

__all__ = ["sum", "mean", "var", "std", "amax", "amin", "max", "min", "argmax", "argmin",
           "logsumexp", "prod", "all", "any", "norm", "cumsum"]


def _reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def _red_rule(name, out_dtype=None):
    def rule(a, dims, keepdim, **kw):
        for d in dims:
            if d >= builtins.max(a.ndim, 1):
                raise IndexError(f"{name}: dim {d} out of range for rank {a.ndim}")
        if name in ("amax", "amin", "argmax", "argmin"):
            for d in dims:
                if a.ndim and a.shape[d] == 0:
                    raise IndexRangeError(f"{name}: cannot reduce over a zero-size dim {d} of shape {a.shape}")
        dt = out_dtype or a.dtype
        if name in ("sum", "prod") and (a.dtype.is_bool or a.dtype.is_integer) and out_dtype is None:
            dt = _dt.int64
        return Aval(_reduced_shape(a.shape, dims, keepdim), dt, a.device)
    return rule


def _keep(g, a_shape, dims, keepdim):
    """Reshape a reduced gradient so it broadcasts against the input."""
    if keepdim or not dims:
        return g
    shape = _reduced_shape(a_shape, dims, True)
    d = g._data
    if type(d) is np.ndarray and d.flags.c_contiguous:
        return bind(RESHAPE, g, shape=shape)   # (a view: only size-1 dims are inserted)
    return reshape(g, shape)


def _sum_vjp(g, out, a, dims, keepdim):
    if g.ndim == 0:
        # A full reduction's 0-d cotangent broadcasts to any shape as it is: one expand,
        # bound directly (a's shape is a valid target by construction, and expand()'s
        # argument checks cost as much as the op)
        shape = a._data.shape if type(a) is Tensor else tuple(a.shape)
        return (bind(EXPAND, g, shape=shape) if shape else g,)
    g = _keep(g, a.shape, dims, keepdim)
    if type(g._data) is np.ndarray:
        shape = a._data.shape
        if g._data.shape != shape:
            # bound directly, as above: only reduced dims, of size 1 in g, are expanded
            return (bind(EXPAND, g, shape=shape),)
    return (expand(g, a.shape),)


def _np_sum(xp, a, dims, keepdim):
    if a.dtype.kind in "biu":
        return xp.sum(a, axis=dims, keepdims=keepdim, dtype=xp.int64)
    if xp is np:
        return np.add.reduce(a, axis=dims, keepdims=keepdim)  # np.sum's wrapper costs µs
    return xp.sum(a, axis=dims, keepdims=keepdim)


def _sum_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_np_sum`'s float branch, with
    the axis bound once per signature (a loss's ``.sum()``: one Python frame less)."""
    if dtype.kind in "biu":
        return None
    dims, keepdim = params["dims"], params["keepdim"]
    if not keepdim and shapes[0] and len(dims) == len(shapes[0]):
        return _full_sum(dims, dtype)
    cols = columns_sum(shapes[0], keepdim, dtype) if dims == (0,) else None
    return cols or functools.partial(np.add.reduce, axis=dims, keepdims=keepdim)


def _full_sum(dims, dtype, _reduce=np.add.reduce, _empty=np.empty):
    """A loss's ``.sum()`` over every dim, reduced into a new 0-d array of the dtype: numpy's
    reduce returns a scalar the plan would make a 0-d array (``np.asarray``, ~0.4 µs); the
    value is bit for bit the same (the same loop; only where the result is written differs)."""
    def full_sum(x):
        return _reduce(x, dims, None, _empty((), dtype))
    return full_sum


SUM = defprim("sum", _np_sum, _red_rule("sum"), _sum_vjp, kind="reduction",
              save=lambda rq: (), extra={"combine": "add", "meta": (0,), "fast": _sum_fast})


def _minmax_vjp(g, out, a, dims, keepdim):
    o = expand(_keep(out, a.shape, dims, keepdim), a.shape)
    return _evenly(g, eq(a, o), a, dims, keepdim)


def _whole_minmax_vjp(g, out, a, dims, keepdim):
    # max()/min() over the whole tensor (PyTorch's evenly_distribute_backward): a nan
    # result sends the gradient to the nans, where amax's ``a == out`` would select none
    o = expand(_keep(out, a.shape, dims, keepdim), a.shape)
    return _evenly(g, where(ne(o, o), ne(a, a), eq(a, o)), a, dims, keepdim)


def _evenly(g, selected, a, dims, keepdim):
    mask = cast(selected, a.dtype)
    # Ties share the gradient evenly, so the total stays g. The division happens on the
    # reduced shape: one full-size pass (the product with the mask), not two.
    count = sum_(mask, dims, True)
    return (mul(mask, _keep(g, a.shape, dims, keepdim) / count),)


# amax, amin, prod: the array's own method (numpy's or cupy's), the same reduction without
# np.amax's Python wrapper (over half of a 16-element call; softmax and max call amax)
def _max_impl(xp, a, dims, keepdim):
    return a.max(axis=dims, keepdims=keepdim)


def _min_impl(xp, a, dims, keepdim):
    return a.min(axis=dims, keepdims=keepdim)


AMAX = defprim("amax", _max_impl, _red_rule("amax"), _minmax_vjp, kind="reduction",
               save=lambda rq: (0,), save_out=True, extra={"combine": "max"})
AMIN = defprim("amin", _min_impl, _red_rule("amin"), _minmax_vjp, kind="reduction",
               save=lambda rq: (0,), save_out=True, extra={"combine": "min"})
# max() and min() of the whole tensor: amax's and amin's values, PyTorch's gradient for them
MAX_ALL = defprim("max_all", _max_impl, _red_rule("amax"), _whole_minmax_vjp, kind="reduction",
                  save=lambda rq: (0,), save_out=True)
MIN_ALL = defprim("min_all", _min_impl, _red_rule("amin"), _whole_minmax_vjp, kind="reduction",
                  save=lambda rq: (0,), save_out=True)


def _prod_vjp(g, out, a, dims, keepdim):
    # out / a is exact when a has no zeros; zeros get the product of the others.
    zero = eq(a, 0.0)
    o = expand(_keep(out, a.shape, dims, keepdim), a.shape)
    others = where(zero, _prod_except_zero(a, zero, dims), o / where(zero, 1.0, a))
    return (expand(_keep(g, a.shape, dims, keepdim), a.shape) * others,)


def _prod_except_zero(a, zero, dims):
    p = expand(prod_(where(zero, 1.0, a), dims, True), a.shape)
    nzeros = expand(sum_(zero, dims, True), a.shape)
    if not is_grad_enabled():
        return where(eq(nzeros, 1), p, 0.0)
    # With two zeros the other one's factor is 0, but its derivative is p: the sum of the
    # zeros but this one, 0 in value, carries it (second derivatives, as PyTorch's).
    other_zero = expand(sum_(where(zero, a, 0.0), dims, True), a.shape) - a
    return where(eq(nzeros, 1), p, where(eq(nzeros, 2), p * other_zero, 0.0))


def _accumulate(xp, ufunc, method: str, a, dim: int):
    """numpy's cumsum/cumprod as the ufunc's own accumulate (integers widened to int64, as
    theirs): an overflow's warning then comes from tracejit's frame, whose float warnings
    tracejit ignores (tracejit/__init__.py), not from numpy's Python wrapper. Narrow floats
    accumulate in double precision, as PyTorch's CPU kernels do: a float32 running sum of
    1024 phases drifts by 2e-4 otherwise."""
    kind = a.dtype.kind
    acc = np.int64 if kind in "biu" else np.promote_types(a.dtype, np.float64) if kind in "fc" else None
    if xp is not np or kind not in "fc" or dim % a.ndim == a.ndim - 1:
        out = getattr(xp, method)(a, axis=dim, dtype=acc) if xp is not np else ufunc.accumulate(a, axis=dim, dtype=acc)
        return out.astype(a.dtype, copy=False) if kind in "fc" else out
    n, inner = a.shape[dim], int(np.prod(a.shape[dim + 1:]))
    if inner >= 64 and a.size >= 256 * n:
        # wide slices a step: added a step at a time (30x numpy's accumulate on 64 steps of
        # 12288 elements, whose strided rows defeat the cache), the same sums in order
        b = a.astype(acc, order="C")
        steps = np.moveaxis(b, dim, 0)
        for i in range(1, n):
            ufunc(steps[i], steps[i - 1], out=steps[i])
        return b.astype(a.dtype)
    # along another dim numpy's casting accumulate is 3x slower than on a double copy with it last
    b = np.moveaxis(a, dim, -1).astype(acc)
    ufunc.accumulate(b, axis=-1, out=b)
    return np.moveaxis(b, -1, dim).astype(a.dtype, order="C")


# (numpy's ufunc itself, not ndarray.prod's Python wrapper: see `_accumulate`)
PROD = defprim("prod", lambda xp, a, dims, keepdim: np.multiply.reduce(a, axis=dims, keepdims=keepdim)
               if xp is np else a.prod(axis=dims, keepdims=keepdim),
               _red_rule("prod"), _prod_vjp, kind="reduction", save=lambda rq: (0,), save_out=True,
               extra={"combine": "mul"})


def _argrule(name):
    base = _red_rule(name, _dt.int64)

    def rule(a, dim, keepdim):
        if dim is None:
            # Over the flattened tensor: no dims left (or all size 1 with keepdim).
            if builtins.any(isinstance(d, int) and d == 0 for d in a.shape):
                raise RuntimeError(f"{name}: cannot take {name} of an empty tensor of shape {a.shape}")
            return Aval((1,) * a.ndim if keepdim else (), _dt.int64, a.device)
        return base(a, (dim,), keepdim)
    return rule


def _arg_impl(name):
    # (the array's own method, numpy's or cupy's: numpy's function wrapper and a closure
    # made per call cost more than a small argmax, ~1 us of its ~3)
    def impl(xp, a, dim, keepdim):
        if dim is None:
            r = getattr(a.reshape(-1), name)()
            return xp.asarray(r).reshape((1,) * a.ndim if keepdim else ())
        return getattr(a, name)(axis=dim, keepdims=keepdim)
    impl.__name__ = impl.__qualname__ = f"_{name}_impl"
    return impl


def _arg_fast(name):   # (the plan's numpy call over one dim: the array's method, no impl frame)
    return lambda shapes, dtype, params: (None if params["dim"] is None
                                          else methodcaller(name, axis=params["dim"], keepdims=params["keepdim"]))


ARGMAX = defprim("argmax", _arg_impl("argmax"), _argrule("argmax"), kind="reduction",
                 extra={"combine": "argmax", "fast": _arg_fast("argmax")})
ARGMIN = defprim("argmin", _arg_impl("argmin"), _argrule("argmin"), kind="reduction",
                 extra={"combine": "argmin", "fast": _arg_fast("argmin")})


def _dims(a, dim, op):
    # dim=() or [] reduces every dim, as PyTorch's reductions do (all and any: none)
    if dim is None or (isinstance(dim, (tuple, list)) and not dim and op not in ("all", "any")):
        n = a.ndim
        dims = _ALL_DIMS.get(n)
        if dims is None:
            dims = _ALL_DIMS[n] = tuple(range(n))
            remember_plain(dims)   # (bind then takes it without checking its items)
        return dims
    if type(dim) is int:   # (one dim, as most calls give: kept per (dim, rank) as the above)
        key = (dim, a.ndim)
        dims = _ONE_DIM.get(key)
        if dims is None:
            dims = normalize_dims(dim, key[1], op)   # (raises for a dim out of range)
            if len(_ONE_DIM) < 256:
                _ONE_DIM[key] = dims
                remember_plain(dims)
        return dims
    return normalize_dims(dim, a.ndim, op)


_ALL_DIMS: dict = {}   # rank -> (0, ..., rank - 1)
_ONE_DIM: dict = {}    # (dim, rank) -> its normalized dims


class _Every:
    """`dim`'s default in sum and mean: every dim. PyTorch's overload without a dim takes no
    keepdim; an explicit dim=None does."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "None"


_EVERY = _Every()


def _dim_keepdim(op: str, dim, keepdim, axis, keepdims):
    """(dim, keepdim) from PyTorch's names or numpy's (which PyTorch takes too); a keepdim
    without a dim raises TypeError, as PyTorch's overloads do (for prod, max, min and median
    dim=None is no overload either)."""
    dim, keepdim = (dim if axis is _EVERY else axis), (keepdim if keepdims is None else keepdims)
    if keepdim is not None and (dim is _EVERY or dim is None and op not in ("sum", "mean")):
        raise TypeError(f"{op}: keepdim={keepdim} needs a dim" + (" (dim=None reduces every dim)"
                                                                  if dim is _EVERY else ""))
    return (None if dim is _EVERY else dim), bool(keepdim)


def sum(a, dim=_EVERY, keepdim: bool | None = None, *, dtype=None, axis=_EVERY, keepdims=None):
    dim, keepdim = _dim_keepdim("sum", dim, keepdim, axis, keepdims)
    if dtype is None:
        return bind(SUM, a, dims=_dims(a, dim, "sum"), keepdim=keepdim)
    a = cast(a, dtype)
    return _as(bind(SUM, a, dims=_dims(a, dim, "sum"), keepdim=keepdim), a.dtype)


def _as(out, dtype):
    # (an integer sum or product is int64 unless `dtype` names another, as PyTorch's)
    return out if out.dtype is dtype else cast(out, dtype)


def sum_(a, dims, keepdim):
    """`sum` over dims already normalized (a tuple of valid, distinct dims): what mean, var
    and the VJPs here call, without sum()'s normalization of `dim` (as `prod_`)."""
    return bind(SUM, a, dims=dims, keepdim=keepdim)


def prod_(a, dims, keepdim):
    return bind(PROD, a, dims=dims, keepdim=keepdim)


@_autocast.fp32
def prod(a, dim=None, keepdim: bool | None = None, *, dtype=None, axis=_EVERY, keepdims=None):
    """The product over one dim or all (PyTorch's prod takes no tuple of dims)."""
    dim, keepdim = _dim_keepdim("prod", dim, keepdim, axis, keepdims)
    if dim is not None:
        dim = normalize_dim(dim, a.ndim, "prod")
    if dtype is None:
        return prod_(a, _dims(a, dim, "prod"), keepdim)
    a = cast(a, dtype)
    return _as(prod_(a, _dims(a, dim, "prod"), keepdim), a.dtype)


def _count(a, dims):
    n = 1
    shape = a.shape   # (one Size, not one per dim)
    for d in dims:
        n = n * shape[d]
    return n


def mean(a, dim=_EVERY, keepdim: bool | None = None, *, dtype=None, axis=_EVERY, keepdims=None):
    dim, keepdim = _dim_keepdim("mean", dim, keepdim, axis, keepdims)
    if dtype is not None:
        a = cast(a, dtype)
    if not a.dtype.differentiable:   # (floating or complex)
        _not_float(a)
    dims = _dims(a, dim, "mean")
    if a.dtype in HALF:
        # (the sum divided in float32 and rounded once, as PyTorch's; rounding the sum
        # first made a second rounding)
        return as_input(sum_(in_opmath(a), dims, keepdim) / _count(a, dims), a)
    return sum_(a, dims, keepdim) / _count(a, dims)


def _not_float(a):
    raise DTypeError(f"mean: expected a floating-point tensor, got {a.dtype.name}; "
                     f"cast with .float() first")


def var(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None, axis=None, keepdims=None):
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if a.dtype.is_complex:   # (PyTorch's: the real and imaginary parts' variances added, real)
        return var(a.real, dim, None, keepdim, correction=correction) + var(a.imag, dim, None, keepdim,
                                                                             correction=correction)
    if not a.dtype.is_floating_point:
        _not_float(a)   # (mean's error, as when var called mean())
    if a.dtype.itemsize == 2:   # (half: computed in float32 and rounded once, as PyTorch's)
        return cast(var(cast(a, _dt.float32), dim, unbiased, keepdim, correction=correction), a.dtype)
    dims = _dims(a, dim, "var")
    n = _count(a, dims)
    d = a - sum_(a, dims, True) / n   # the mean, over dims var normalized already
    divisor = n - correction
    if isinstance(n, int) or correction > 1:   # (a symbolic n is at least 2)
        divisor = builtins.max(divisor, 0)   # PyTorch's max(0, N - correction)
    # The corrected two-pass sum: the deviations' own sum takes out the rounding error of the
    # mean, which alone adds its square to every term (data far from zero with a small spread
    # lost digits, where PyTorch's wider accumulator keeps them); clamped, as rounding can
    # take a constant's variance just under zero.
    s = sum_(d, dims, keepdim)
    return maximum(sum_(d * d, dims, keepdim) - s * s / n, 0.0) / divisor


def std(a, dim=None, unbiased=None, keepdim: bool = False, *, correction=None, axis=None, keepdims=None):
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    # (a constant's std has gradient 0, as PyTorch's, not the root's 0 * inf; half: in float32)
    wide = cast(a, _dt.float32) if a.dtype.itemsize == 2 and a.dtype.is_floating_point else a
    out = _root(var(wide, dim, unbiased, keepdim, correction=correction), 2)
    return out if wide is a else cast(out, a.dtype)


def amax(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    return bind(AMAX, a, dims=_dims(a, dim, "amax"), keepdim=keepdim)


def amin(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    return bind(AMIN, a, dims=_dims(a, dim, "amin"), keepdim=keepdim)


class ValuesIndices(namedtuple("ValuesIndices", ["values", "indices"])):
    """(values, indices), like torch.return_types.max / sort / topk; a namedtuple, so a
    compiled function returns it rebuilt around its results."""

    __slots__ = ()


def max(a, dim=None, keepdim: bool | None = None, *, axis=_EVERY, keepdims=None):
    return _extreme("max", maximum, MAX_ALL, ARGMAX, a, dim, keepdim, axis, keepdims)


def min(a, dim=None, keepdim: bool | None = None, *, axis=_EVERY, keepdims=None):
    return _extreme("min", minimum, MIN_ALL, ARGMIN, a, dim, keepdim, axis, keepdims)


def _extreme(op: str, elementwise, whole, arg, a, dim, keepdim, axis, keepdims):
    """max or min: of all of `a`, along `dim` with indices, or of `a` and a tensor `dim`."""
    dim, keepdim = _dim_keepdim(op, dim, keepdim, axis, keepdims)
    if hasattr(dim, "_data"):  # torch.max(a, b) is elementwise
        return elementwise(a, dim)
    if dim is None:
        return bind(whole, a, dims=_dims(a, None, op), keepdim=False)
    if a.ndim == 0:
        idx = _arg(arg, a, dim, keepdim)   # (checks dim; the value is `a`'s, gradient 1 also at a NaN)
        return ValuesIndices(clone(a), idx)
    return _selected(a, _arg(arg, a, dim, True), dim, keepdim)


def _selected(a, idx, dim, keepdim: bool) -> ValuesIndices:
    """max/min along `dim` as the values at the indices taken (kept dim): the gradient goes to
    that one index, ties included, and reads no values, as PyTorch's (value_selecting_reduction_backward)."""
    d = normalize_dim(dim, a.ndim, "max")
    vals = bind(GATHER, a, idx, dim=d)   # (gather(a, d, idx) with `d` normalized)
    return ValuesIndices(vals, idx) if keepdim else ValuesIndices(squeeze(vals, d), squeeze(idx, d))


def _arg(prim, a, dim, keepdim: bool):
    d = None if dim is None else normalize_dim(dim, a.ndim, prim.name)
    if a.ndim == 0:   # (a 0-d result with or without keepdim, as PyTorch's)
        d = None
    return bind(prim, a, dim=d, keepdim=keepdim)


def _refuse_bool(a, name: str):
    if a.dtype.is_bool:   # (max(dim) of bools takes their _arg: PyTorch refuses only these)
        raise DTypeError(f"{name}(): does not support bool input, as PyTorch's")


def argmax(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    _refuse_bool(a, "argmax")
    return _arg(ARGMAX, a, dim if axis is None else axis, keepdim if keepdims is None else keepdims)


def argmin(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    _refuse_bool(a, "argmin")
    return _arg(ARGMIN, a, dim if axis is None else axis, keepdim if keepdims is None else keepdims)


def logsumexp(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    """log(sum(exp(a))) over `dim` (ops/logsumexp_prim.py), which PyTorch requires; an
    integer or bool tensor in the default float dtype, as PyTorch's."""
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    if dim is None:
        raise TypeError("logsumexp: missing the required argument 'dim' (an int or a tuple of ints)")
    dims = _dims(a, dim, "logsumexp")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        a = cast(a, _dt.get_default_dtype())
    if builtins.any(isinstance(a.shape[d], int) and a.shape[d] == 0 for d in dims):
        # log of an empty sum, on the autograd graph (the gradient of an empty input: empty)
        return sum_(a, dims, keepdim) - math.inf
    from .logsumexp_prim import logsumexp_dims   # (that module imports this one)
    return logsumexp_dims(a, dims, keepdim)


def all(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    """Whether every element is nonzero: bool, or uint8 for a uint8 input (PyTorch's rule)."""
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    b = cast(a, _dt.bool_)
    dims = _dims(b, dim, "all")
    if _nonempty(b, dims):   # one reduction (a distribution's argument check runs three a call)
        out = bind(AMIN, b, dims=dims, keepdim=keepdim)
    else:   # an empty (or symbolic) extent: counting, so an empty reduction gives True, as in PyTorch
        out = eq(sum_(logical_not(b), dims, keepdim), 0)
    return cast(out, _dt.uint8) if a.dtype is _dt.uint8 else out


def any(a, dim=None, keepdim: bool = False, *, axis=None, keepdims=None):
    """Whether some element is nonzero: bool, or uint8 for a uint8 input (PyTorch's rule)."""
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    b = cast(a, _dt.bool_)
    dims = _dims(b, dim, "any")
    out = bind(AMAX, b, dims=dims, keepdim=keepdim) if _nonempty(b, dims) else gt(sum_(b, dims, keepdim), 0)
    return cast(out, _dt.uint8) if a.dtype is _dt.uint8 else out


def _nonempty(a, dims) -> bool:
    """Whether every reduced extent of `a` is a known nonzero int (amin/amax reject empty
    extents, and a symbolic one may be zero)."""
    shape = a.shape
    for d in dims:
        n = shape[d]
        if type(n) is not int or n == 0:
            return False
    return True


def _norm2_impl(xp, a, keepdim):
    """The 2-norm of all of `a` in one pass, without the full-size square ``a * a`` (a 24 MB
    gradient's norm in clip_grad_norm_: 2.5x faster than square, sum, root): chunk by chunk
    (256 KB of float32: in cache while it is summed), each chunk's dot with itself in its
    dtype, the chunks added in float64."""
    flat = a.reshape(-1)
    if xp is np:
        total = 0.0
        for lo in range(0, flat.size, 1 << 16):
            c = flat[lo:lo + (1 << 16)]
            total += float(np.dot(c, c))
        out = np.asarray(math.sqrt(total), dtype=a.dtype)
    else:
        out = xp.sqrt(xp.dot(flat, flat))
    return out.reshape((1,) * a.ndim) if keepdim else out


def _norm2_vjp(g, out, a, keepdim):
    # a / |a|, and 0 for a zero vector (not NaN), as PyTorch's
    zero = eq(out, 0)
    return (mul(a, where(zero, 0.0, g / where(zero, 1.0, out))),)


NORM2 = defprim("norm2", _norm2_impl,
                lambda a, keepdim: Aval((1,) * a.ndim if keepdim else (), a.dtype, a.device),
                _norm2_vjp, kind="other", save=lambda rq: (0,), save_out=True, extra={"row_major": True})


@takes("a:input")
def norm(a, p=2, dim=None, keepdim: bool = False):
    """Vector p-norms over `dim` (all elements when None): torch.norm, linalg.vector_norm and
    F.normalize share this one definition."""
    if isinstance(p, str) and p != "fro":
        raise ArgumentError(f"norm: p must be a number, 'fro' or 'nuc', got {p!r}")
    if a.dtype.is_complex:   # (the norm of the moduli)
        a = _abs(a)
    if a.dtype.itemsize == 2:   # (half: computed in float32 and rounded once, as PyTorch's)
        return cast(norm(cast(a, _dt.float32), p, dim, keepdim), a.dtype)
    if p == 2 or p == "fro":
        if dim is None and (a.dtype is _dt.float32 or a.dtype is _dt.float64):
            return bind(NORM2, a, keepdim=bool(keepdim))
        return _root(sum(a * a, dim, keepdim), 2)
    if p == 1:
        return sum(_abs(a), dim, keepdim)
    if p == math.inf:
        return amax(_abs(a), dim, keepdim)
    if p == -math.inf:
        return amin(_abs(a), dim, keepdim)
    if p == 0:   # (the count of nonzeros, in the input's dtype)
        return sum(bind(NONZERO_INDICATOR, a), dim, keepdim)
    powered = _pow(_abs(a), p)
    if p < 1 and (a.requires_grad or trace_state.tracer is not None):
        # |x|^p's slope is infinite at 0 (times sign(0) = 0: NaN); PyTorch's gradient is 0,
        # there and, for p < 0 (the norm is then 0), everywhere
        zero = eq(a, 0)
        powered = where(zero, 0.0 if p > 0 else math.inf, _pow(where(zero, 1.0, _abs(a)), p))
    return _root(sum(powered, dim, keepdim), p)


def _root(s, p):
    """s ** (1/p) whose gradient is 0 where s is 0 (a zero vector's norm), as PyTorch's: the
    plain root's infinite slope times the zero inner gradient would give NaN."""
    if not s.requires_grad and trace_state.tracer is None:   # (a capture may differentiate it)
        return sqrt(s) if p == 2 else _pow(s, 1.0 / p)
    zero = eq(s, 0)
    r = sqrt(where(zero, 1.0, s)) if p == 2 else _pow(where(zero, 1.0, s), 1.0 / p)
    return where(zero, 0.0, r)


def _cumsum_rule(a, dim):
    # Integer and bool sums accumulate in int64, as in PyTorch.
    dt = a.dtype if a.dtype.is_floating_point else _dt.int64
    return Aval(a.shape, dt, a.device)


def _rev_cumsum(x, dim: int):
    """The sums of `x` along `dim` from each position to the end: cumsum's VJP."""
    return flip(cumsum(flip(x, (dim,)), dim), (dim,))


CUMSUM = defprim("cumsum", lambda xp, a, dim: _accumulate(xp, np.add, "cumsum", a, dim), _cumsum_rule,
                 lambda g, out, a, dim: (_rev_cumsum(g, dim),), kind="other", save=lambda rq: (),
                 extra={"batch": shift_dims})


def cumulative(prim, a, dim: int, dtype):
    """cumsum's or cumprod's record `prim` along `dim`, after a cast to `dtype`; integers
    and bools accumulate in int64."""
    if dtype is not None:
        a = cast(a, dtype)
    if a.ndim == 0:
        return clone(a) if a.dtype.differentiable or dtype is not None else clone(a).to(_dt.int64)
    out = bind(prim, a, dim=normalize_dim(dim, a.ndim, prim.name))
    return out if dtype is None else _as(out, a.dtype)


def cumsum(a, dim: int = None, *, dtype=None, axis=None):
    return cumulative(CUMSUM, a, dim if axis is None else axis, dtype)
