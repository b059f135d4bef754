"""More reductions and scans with PyTorch's signatures, as composites:

median / nanmedian / kthvalue / quantile / mode (a sort, then the picked positions gathered, so
the gradient reaches the chosen elements), nanmean / nansum, var_mean / std_mean, aminmax,
cummax / cummin, logcumsumexp, count_nonzero, diff, gradient, trapezoid / cumulative_trapezoid, dist,
equal, isin, renorm; and the data-dependent ones computed from the values (no gradient, as in
PyTorch): unique, unique_consecutive, bincount, histc, bucketize, searchsorted.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled
from ..errors import ArgumentError, IndexRangeError, ShapeError, UnsupportedDTypeError, expect_floating, expect_not_bool
from ..shapes import as_dim, normalize_dim
from ..tensor import Tensor
from .creation import full, tensor
from .elementwise import cast, floor, isnan, where
from .math_more import ceil, lerp
from .indexing import gather
from .reductions import (ValuesIndices as _ValuesIndices, _EVERY, _dim_keepdim, amax, amin, max as _max, min as _min, cumsum, mean,
                         std, sum as _sum, var)
from .shape import cat, narrow, reshape
from .tensorfns import sort
from .registry import refuse_tracing
from .host_steps import host_step, without_derivative
from .dtype_checks import takes
from . import autocast as _autocast, eager as _eager

__all__ = ["median", "nanmedian", "kthvalue", "quantile", "nanquantile", "nanmean", "nansum",
           "var_mean", "std_mean", "aminmax", "cummax", "cummin", "logcumsumexp", "count_nonzero",
           "diff", "gradient", "trapezoid", "trapz", "cumulative_trapezoid", "dist", "equal", "isin", "unique",
           "unique_consecutive", "bincount", "histc", "bucketize", "searchsorted", "mode", "renorm"]

_MinMax = namedtuple("aminmax", ["min", "max"])


def _pick(input, dim, k, keepdim):
    """The k-th smallest along dim (0-based), with its index (PyTorch's median/kthvalue)."""
    if input.ndim == 0:
        normalize_dim(dim, 0, "kthvalue")
        return _ValuesIndices(input.clone(), tensor(0, device=input.device))
    vals, idx = sort(input, dim)
    d = normalize_dim(dim, input.ndim, "kthvalue")
    v = narrow(vals, d, k, 1)
    i = narrow(idx, d, k, 1)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return _ValuesIndices(v, i)


@takes("input", ints=True)
def median(input, dim=None, keepdim: bool | None = None):
    """The lower median: of all elements (dim None), or values and indices along dim; NaN
    if the slice holds one (the first NaN, as PyTorch)."""
    return _median(input, dim, keepdim, "median")


@takes("input", ints=True)
def nanmedian(input, dim=None, keepdim: bool | None = None):
    """median ignoring NaN (NaN sorts last; the middle of the non-NaN count is picked)."""
    return _median(input, dim, keepdim, "nanmedian")


def _median(input, dim, keepdim, name):
    dim, keepdim = _dim_keepdim(name, dim, keepdim, _EVERY, None)
    if dim is None:
        if input.numel() == 0 and input.dtype.is_floating_point:
            return full((), float("nan"), dtype=input.dtype, device=input.device)
        v = _median(reshape(input, (-1,)), 0, False, name).values
        # (eagerly only an input that requires grad pays the two reductions below; a traced
        # one may come to require it through the graph)
        if not (is_grad_enabled() and input.dtype.is_floating_point
                and (input.requires_grad or _eager._tracers_active)):
            return v
        # PyTorch's gradient: shared by every element equal to the median (the NaNs for a
        # NaN), as max()'s; min() picks them when the median is -inf, max() otherwise
        v = v.detach()
        hit = (input == v) | (isnan(input) & isnan(v))
        return where(v == float("-inf"), _min(where(hit, input, float("inf"))),
                     _max(where(hit, input, float("-inf"))))
    d = normalize_dim(dim, input.ndim, name)
    if input.ndim and not input.shape[d]:
        raise IndexRangeError(f"{name}(): expected reduction dim {d} to have non-zero size")
    if input.ndim == 0:
        return _ValuesIndices(input.clone(), tensor(0, device=input.device))
    # the sort only chooses: the value is gathered from the input at the index taken, so
    # the gradient adds one value a slice, not a scatter of the whole sorted input back
    # (median of (256, 255) over dim 1, forward and backward: 3.1x PyTorch's time -> ~1.3x)
    vals, idx = sort(input.detach(), d, stable=True)
    n = input.shape[d]
    if input.dtype.is_floating_point:   # (NaN sorts last: the first NaN sits at the non-NaN count)
        count = _sum(cast(~isnan(input), _dt.int64), d, keepdim=True)
        pos = where(count < n, count, (n - 1) // 2) if name == "median" else where(count > 0, (count - 1) // 2, 0)
        i = gather(idx, d, pos)
    else:   # (no NaN: the middle of all n)
        i = narrow(idx, d, (n - 1) // 2, 1)
    v = gather(input, d, i)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return _ValuesIndices(v, i)


def kthvalue(input, k: int, dim: int = -1, keepdim: bool = False):
    if input.ndim:   # (PyTorch's 0-d kthvalue returns its one element, bool too)
        expect_not_bool("kthvalue", "input", input)
    n = input.shape[normalize_dim(dim, input.ndim, "kthvalue")] if input.ndim else 1
    if not 1 <= k <= n:
        raise IndexRangeError(f"kthvalue: k ({k}) must be in [1, {n}]")
    return _pick(input, dim, k - 1, keepdim)


def mode(input, dim: int = -1, keepdim: bool = False):
    """The most frequent value along dim (the smallest among ties) and the index of its
    last occurrence, as PyTorch returns them."""
    refuse_tracing("mode", "its input")
    _refuse_complex("mode", input)
    d = normalize_dim(dim, input.ndim, "mode") if input.ndim else 0
    if input.ndim and not input.shape[d]:
        raise IndexRangeError(f"mode(): expected reduction dim {d} to have non-zero size")
    host = input.detach().cpu().numpy()
    v = np.moveaxis(host, d, -1) if input.ndim else host.reshape(1)
    rows = v.reshape(-1, v.shape[-1]) if v.shape[-1] else v.reshape(0, 0)
    picks = np.zeros(rows.shape[0], np.int64)
    for r, row in enumerate(rows):
        vals, counts = np.unique(row, return_counts=True, equal_nan=False)
        best = vals[np.argmax(counts)]
        picks[r] = np.flatnonzero((row == best) | ((row != row) & (best != best)))[-1]   # (a NaN mode)
    idx = tensor(picks.reshape(v.shape[:-1] + (1,)), device=input.device)
    if input.ndim == 0:
        return _ValuesIndices(input.clone(), tensor(0, device=input.device))
    if d != input.ndim - 1:
        idx = idx.movedim(-1, d)
    vals = gather(input, d, idx)
    if not keepdim:
        vals, idx = vals.squeeze(d), idx.squeeze(d)
    return _ValuesIndices(vals, idx)


@takes("input")
def renorm(input, p, dim: int, maxnorm):
    """Each slice along dim whose p-norm exceeds maxnorm scaled down to norm maxnorm."""
    if input.ndim < 2:
        raise ValueError(f"renorm: expected a tensor of at least 2 dims, got {input.ndim}")
    d = normalize_dim(dim, input.ndim, "renorm")
    others = tuple(i for i in range(input.ndim) if i != d)
    a = input.abs()
    norms = (_sum(a ** p, others, keepdim=True)) ** (1.0 / p) if p != float("inf") else amax(a, others, True)
    return input * where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)


@_autocast.fp32
@takes("input")
def quantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    return _quantile(input, q, dim, keepdim, interpolation, ignore_nan=False)


@_autocast.fp32
@takes("input")
def nanquantile(input, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear"):
    return _quantile(input, q, dim, keepdim, interpolation, ignore_nan=True)


def _quantile(input, q, dim, keepdim, interpolation, ignore_nan):
    if input.dtype.itemsize == 2:   # (as PyTorch's: no half kernel)
        raise UnsupportedDTypeError(f"quantile: input must be a float32 or float64 tensor, got {input.dtype.name}")
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError(f"quantile: interpolation must be linear, lower, higher, midpoint or nearest, "
                         f"got {interpolation!r}")
    scalar_q = not isinstance(q, Tensor) and np.ndim(q) == 0
    qs = np.atleast_1d(q.detach().numpy() if isinstance(q, Tensor) else np.asarray(q, dtype=np.float64))
    if ((qs < 0) | (qs > 1)).any():
        raise ArgumentError("quantile: q must be in the range [0, 1]")
    x = reshape(input, (-1,)) if dim is None else input
    d = 0 if dim is None else normalize_dim(dim, input.ndim, "quantile")
    n = x.shape[d]
    if not input.numel():
        raise IndexRangeError(f"quantile(): input tensor must be non-empty, got shape {tuple(input.shape)}")
    vals, _ = sort(x, d)
    # (NaN sorts last: a row holding one gives its last value, as PyTorch's)
    last = None if ignore_nan else narrow(vals, d, n - 1, 1)
    count = _sum(cast(~isnan(x), x.dtype), d, keepdim=True) if ignore_nan else None
    outs = []
    for qv in qs:
        if count is None:
            pos = qv * (n - 1)
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            frac = pos - lo
            a, b = narrow(vals, d, lo, 1), narrow(vals, d, hi, 1)
        else:
            pos = qv * (count - 1)
            lo_t = cast(floor(pos).clamp(min=0), _dt.int64)
            hi_t = cast(ceil(pos).clamp(min=0), _dt.int64)
            frac = pos - floor(pos)
            a, b = gather(vals, d, lo_t), gather(vals, d, hi_t)
        if interpolation == "lower":
            r = a
        elif interpolation == "higher":
            r = b
        elif interpolation == "nearest":   # (the position rounded half to even)
            if count is None:
                r = a if np.round(pos) == lo else b
            else:
                r = where((frac > 0.5) | ((frac == 0.5) & (lo_t % 2 == 1)), b, a)
        else:   # (PyTorch's lerp: its NaN where an infinite end meets a weight other than 0)
            r = lerp(a, b, 0.5 if interpolation == "midpoint" else frac)
        if last is not None:
            r = where(isnan(last), last, r)
        if not keepdim:
            r = r.squeeze(d)
        elif dim is None:
            r = reshape(r, (1,) * input.ndim)
        outs.append(r)
    if scalar_q:
        return outs[0]
    from .shape import stack
    return stack(outs, 0)


@takes("input")
def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    ok = ~isnan(input)
    return nansum(input, dim, keepdim) / _sum(cast(ok, input.dtype), dim, keepdim=keepdim)


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    x = where(isnan(input), 0.0, input) if input.dtype.is_floating_point else input
    kw = {} if dtype is None else {"dtype": input.dtype}   # (an integer dtype= kept, as sum's)
    return _sum(x, dim, keepdim=keepdim, **kw)


def var_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return var(input, dim, correction=correction, keepdim=keepdim), mean(input, dim, keepdim=keepdim)


def std_mean(input, dim=None, *, correction=1, keepdim: bool = False, unbiased=None):
    if unbiased is not None:
        correction = 1 if unbiased else 0
    return std(input, dim, correction=correction, keepdim=keepdim), mean(input, dim, keepdim=keepdim)


def aminmax(input, *, dim=None, keepdim: bool = False):
    if dim is not None:   # (one dim: PyTorch's aminmax takes no tuple)
        dim = normalize_dim(dim, input.ndim, "aminmax")
    elif keepdim:   # (keepdim: every dim kept as 1, as PyTorch)
        dim = tuple(range(input.ndim))
    return _MinMax(amin(input, dim, keepdim), amax(input, dim, keepdim))


def _cum_extreme_index(xp, a, dim, better):
    """The index of the running max/min's last occurrence along `dim` (as PyTorch)."""
    a = xp.moveaxis(a, dim, -1)
    idx = xp.zeros(a.shape, dtype=np.int64)
    best = a[..., :1].copy()
    best_i = xp.zeros(a.shape[:-1] + (1,), dtype=np.int64)
    for j in range(a.shape[-1]):
        take = better(a[..., j:j + 1], best) | (a[..., j:j + 1] == best) | xp.isnan(a[..., j:j + 1])
        best = xp.where(take, a[..., j:j + 1], best)
        best_i = xp.where(take, j, best_i)
        idx[..., j:j + 1] = best_i
    return (xp.moveaxis(idx, -1, dim),)


def _cum_extreme(input, dim, better, name):
    """Running max/min along dim with its indices: the values gathered at them (the
    gradient flows to each value's source)."""
    d = normalize_dim(dim, input.ndim, name)
    _refuse_complex(name, input)
    if input.ndim == 0:
        return _ValuesIndices(input.clone(), tensor(0, device=input.device))
    (indices,) = host_step(_cum_extreme_index, [input], [input.shape], [_dt.int64], name, dim=d, better=better)
    return _ValuesIndices(gather(input, d, indices), indices)


def _refuse_complex(name, input):
    if input.dtype.is_complex:   # (complex numbers have no order: PyTorch has no kernel either)
        raise UnsupportedDTypeError(f"{name}: not implemented for complex tensors ({input.dtype.name})")


def cummax(input, dim: int):
    return _cum_extreme(input, dim, np.greater, "cummax")


def cummin(input, dim: int):
    return _cum_extreme(input, dim, np.less, "cummin")


@takes("input")
def logcumsumexp(input, dim: int):
    d = normalize_dim(dim, input.ndim, "logcumsumexp")
    if input.ndim and input.shape[d] == 0:
        return input.clone()   # (nothing to accumulate; amax would refuse the empty dim)
    if input.ndim == 0:
        return input * 1.0
    from .logcumsumexp_prim import logcumsumexp_dim   # (one primitive, eager and traced)
    return logcumsumexp_dim(input, d)


def count_nonzero(input, dim=None):
    nz = cast(input != 0, _dt.int64)
    return _sum(nz) if dim is None else _sum(nz, dim)


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The n-th forward difference along `dim`; n = 0 gives a copy of the input without
    `prepend` and `append`, as PyTorch's."""
    d = normalize_dim(dim, input.ndim, "diff")
    if n < 0:
        raise ArgumentError(f"diff: order n must be non-negative, got {n}")
    if n == 0:
        return input.clone()
    x = input
    if prepend is not None or append is not None:
        x = cat([t for t in (prepend, x, append) if t is not None], d)
    for _ in range(n):
        m = x.shape[d]
        if m == 0:   # (an empty dim stays empty)
            break
        if x.dtype is _dt.bool_:
            x = narrow(x, d, 1, m - 1) != narrow(x, d, 0, m - 1)
        else:
            x = narrow(x, d, 1, m - 1) - narrow(x, d, 0, m - 1)
    return input.clone() if x is input else x   # (an empty input: new memory, as PyTorch's)


def trapezoid(y, x=None, *, dx=None, dim: int = -1):
    d = normalize_dim(dim, y.ndim, "trapezoid")
    m = y.shape[d]
    avg = (narrow(y, d, 1, m - 1) + narrow(y, d, 0, m - 1)) * 0.5
    if x is not None:
        dxs = diff(x, dim=-1 if x.ndim == 1 else d)
        if x.ndim == 1 and y.ndim > 1:
            shape = [1] * y.ndim
            shape[d] = m - 1
            dxs = reshape(dxs, tuple(shape))
        return _sum(avg * dxs, d)
    return _sum(avg, d) * (1.0 if dx is None else dx)


trapz = trapezoid


def cumulative_trapezoid(y, x=None, *, dx=None, dim: int = -1):
    d = normalize_dim(dim, y.ndim, "cumulative_trapezoid")
    m = y.shape[d]
    avg = (narrow(y, d, 1, m - 1) + narrow(y, d, 0, m - 1)) * 0.5
    if x is not None:
        avg = avg * diff(x, dim=-1 if x.ndim == 1 else d)
    elif dx is not None:
        avg = avg * dx
    return cumsum(avg, d)


def gradient(input, *, spacing=1, dim=None, edge_order: int = 1) -> tuple:
    """Central differences along each of `dim` (all dims by default), one-sided at the edges
    (`edge_order` 1 or 2); `spacing` a number, one per dim, or each dim's coordinates (1-D
    tensors), with PyTorch's formulas (ATen's gradient helpers)."""
    dims = list(range(input.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [normalize_dim(d, input.ndim, "gradient") for d in dims]
    steps = list(spacing) if isinstance(spacing, (list, tuple)) else [spacing] * len(dims)
    if len(steps) != len(dims) or edge_order not in (1, 2):
        raise ArgumentError(f"gradient: expected spacing to be a number or one per dim ({len(dims)}) and "
                            f"edge_order 1 or 2, got {len(steps)} spacings and edge_order {edge_order}")
    out = []
    for d, h in zip(dims, steps):
        n = input.shape[d]
        if n < edge_order + 1:
            raise ShapeError(f"gradient: each dim's size must be at least edge_order + 1, got size {n} "
                             f"at dim {d}")

        def sl(a, b=None):
            return narrow(input, d, a % n, ((n if b is None else b % n) - a % n))
        if isinstance(h, Tensor):   # coordinates: the non-uniform formulas
            dx = diff(h)
            view = [1] * input.ndim
            view[d] = n - 2
            dx1, dx2 = reshape(dx[:-1], tuple(view)), reshape(dx[1:], tuple(view))
            center = (-dx2 / (dx1 * (dx1 + dx2)) * sl(0, -2) + (dx2 - dx1) / (dx1 * dx2) * sl(1, -1)
                      + dx1 / (dx2 * (dx1 + dx2)) * sl(2))
            h0, h1, hl, hm = (float(dx[i]) for i in (0, 1, -1, -2))
        else:
            center = (sl(2) - sl(0, -2)) / h / 2
            h0 = h1 = hl = hm = h
        if edge_order == 1:
            first, last = (sl(1, 2) - sl(0, 1)) / h0, (sl(-1) - sl(-2, -1)) / hl
        else:
            first = (-(2.0 * h0 + h1) / (h0 * (h0 + h1)) * sl(0, 1) + (h0 + h1) / (h0 * h1) * sl(1, 2)
                     - h0 / (h1 * (h0 + h1)) * sl(2, 3))
            last = (hl / (hm * (hl + hm)) * sl(-3, -2) - (hl + hm) / (hl * hm) * sl(-2, -1)
                    + (2 * hl + hm) / (hl * (hl + hm)) * sl(-1))
        out.append(cat([first, center, last], d))
    return tuple(out)


def dist(input, other, p: float = 2):
    fl = [t for t in (input, other) if isinstance(t, Tensor)
          and (t.dtype.is_floating_point or t.dtype.is_complex)]
    if not fl:   # (PyTorch's norm of the difference refuses it; one float operand promotes)
        expect_floating("dist", "input", input)
    diff_ = (input - other).abs()
    if p == float("inf"):
        return amax(diff_)
    if p == 0:
        return _sum(cast(diff_ != 0, diff_.dtype))
    # (vector_norm's gradient is 0 where the operands are equal, as PyTorch's; the root of
    # the composite's sum gave 0 * inf = nan there)
    from ..linalg import vector_norm
    return vector_norm(diff_, p)


def equal(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape) and bool((input == other).all())


def _isin_array(xp, el, te, invert):
    return (xp.isin(el, te, invert=invert),)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False):
    el = elements if isinstance(elements, Tensor) else tensor(elements)
    te = test_elements if isinstance(test_elements, Tensor) else tensor(test_elements, device=el.device)
    return host_step(_isin_array, [el, te], [el.shape], [_dt.bool_], "isin", invert=invert)[0]


def _unique_arrays(xp, a, dim, inverse=True):
    if dim is None and not inverse:
        # without the inverse numpy sorts the values in place instead of an argsort of
        # them (3x faster); the inverse slot is a placeholder nobody reads
        vals, cnt = xp.unique(a, return_counts=True, equal_nan=False)
        return vals, xp.zeros(a.shape, np.int64), cnt.astype(np.int64)
    if dim is None:
        # (each NaN its own value, as PyTorch: NaN != NaN)
        vals, inv, cnt = xp.unique(a, return_inverse=True, return_counts=True, equal_nan=False)
        inv = inv.reshape(a.shape)
    else:
        vals, inv, cnt = xp.unique(a, return_inverse=True, return_counts=True, axis=dim)
        inv = inv.reshape(-1)
    return vals, inv.astype(np.int64), cnt.astype(np.int64)


def _unique_consecutive_arrays(xp, a, dim):
    """Runs of equal elements (with `dim`: of equal slices along it; the inverse indexes
    those slices)."""
    moved = a.reshape(-1) if dim is None else xp.moveaxis(a, dim, 0)
    rows = moved.reshape(moved.shape[0], int(np.prod(moved.shape[1:])))
    n = rows.shape[0]
    starts = (xp.concatenate([xp.ones(1, dtype=bool), (rows[1:] != rows[:-1]).any(1)]) if n
              else xp.zeros(0, dtype=bool))
    vals = moved[starts] if dim is None else xp.moveaxis(moved[starts], 0, dim)
    inv = xp.cumsum(starts).astype(np.int64) - 1
    counts = xp.diff(xp.append(xp.flatnonzero(starts), n)).astype(np.int64)
    return vals, inv.reshape(a.shape) if dim is None else inv, counts


def _unique(fn, name, input, return_inverse, return_counts, dim, **kw):
    d = None if dim is None else normalize_dim(dim, input.ndim, name)
    zero = [i for i, n in enumerate(input.shape) if n == 0]
    if d is not None and zero and zero != [d]:   # (PyTorch's refusals: no unique slice to return)
        raise ArgumentError(f"{name}: " + ("Number of zero sized dimensions is more than one, so unique cannot be "
                            "applied" if len(zero) > 1 else "There are 0 sized dimensions, and they aren't "
                            f"selected by dim={dim}, so unique cannot be applied"))
    shape = ("n",) if d is None else tuple(input.shape[:d]) + ("n",) + tuple(input.shape[d + 1:])
    out = host_step(fn, [input], [shape, input.shape if d is None else (input.shape[d],), ("n",)],
                    [input.dtype, _dt.int64, _dt.int64], name, dim=d, **kw)
    out = [without_derivative(out[0], input, op=name)] + [t for t, want in zip(out[1:], (return_inverse, return_counts))
                                                         if want]
    return out[0] if len(out) == 1 else tuple(out)


def unique(input, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
           dim=None):
    return _unique(_unique_arrays, "unique", input, return_inverse, return_counts, dim,
                   inverse=bool(return_inverse))


def unique_consecutive(input, return_inverse: bool = False, return_counts: bool = False, dim=None):
    return _unique(_unique_consecutive_arrays, "unique_consecutive", input, return_inverse, return_counts, dim)


def _bincount_arrays(xp, a, *weights, minlength):
    if a.size and a.min() < 0:
        raise ArgumentError("bincount: input must contain non-negative integers")
    if not weights:
        return (xp.bincount(a, minlength=minlength).astype(np.int64),)
    w = weights[0]
    return (xp.bincount(a, weights=w, minlength=minlength).astype(w.dtype if w.dtype.kind == "f" else np.float64),)


def bincount(input, weights=None, minlength: int = 0):
    if input.ndim != 1 or not input.dtype.is_integer:
        raise ValueError("bincount: expected a 1-D tensor of non-negative integers")
    args = [input] if weights is None else [input, weights]
    dt = _dt.int64 if weights is None else weights.dtype if weights.dtype.is_floating_point else _dt.float64
    out = host_step(_bincount_arrays, args, [("n",)], [dt], "bincount", minlength=as_dim(minlength))[0]
    return without_derivative(out, weights, op="bincount")


def _histc_array(xp, a, *, bins, lo, hi):
    a = a.reshape(-1)
    if lo == hi:   # (PyTorch's default range: the data's own, widened by 1 when it is one value)
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts, _ = xp.histogram(a[(a >= lo) & (a <= hi)], bins=bins, range=(lo, hi))
    return (counts.astype(a.dtype),)


@takes("input")
def histc(input, bins: int = 100, min: float = 0, max: float = 0):  # noqa: A002
    # (a host step: its result has `bins` elements whatever the data, so a capture keeps it)
    return host_step(_histc_array, [input], [(int(bins),)], [input.dtype], "histc", bins=int(bins),
                     lo=float(min), hi=float(max))[0]


def searchsorted(sorted_sequence, input, *, out_int32: bool = False, right: bool = False, side=None,
                 sorter=None):
    """Indices where `input`'s values would go in the last dim of `sorted_sequence` (sorted
    ascending, or put in order by the indices `sorter`) to keep it sorted."""
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ValueError("searchsorted: side='left' and right=True contradict each other")
        right = side == "right"
    vals = input if isinstance(input, Tensor) else tensor(input)
    if sorted_sequence.ndim > 1 and tuple(sorted_sequence.shape[:-1]) != tuple(vals.shape[:-1]):
        raise ShapeError(f"searchsorted: sorted_sequence's leading dims {tuple(sorted_sequence.shape[:-1])} "
                         f"must match input's {tuple(vals.shape[:-1])} (or sorted_sequence be 1-D)")
    args = [sorted_sequence, vals]
    if sorter is not None:
        args.append(sorter if isinstance(sorter, Tensor) else tensor(sorter))
        if tuple(args[2].shape) != tuple(sorted_sequence.shape):
            raise ShapeError(f"searchsorted: sorter of shape {tuple(args[2].shape)} should have the sorted "
                             f"sequence's shape {tuple(sorted_sequence.shape)}")
    dt = _dt.int32 if out_int32 else _dt.int64
    return host_step(_searchsorted_array, args, [vals.shape], [dt], "searchsorted", right=right,
                     out_int32=out_int32)[0]


def _searchsorted_array(xp, seq, vals, *sorter, right, out_int32):
    if sorter:
        seq = xp.take_along_axis(seq, sorter[0].astype(np.int64), -1)
    s = "right" if right else "left"
    dt = np.int32 if out_int32 else np.int64
    # unsorted (or nan): PyTorch's own answers; a batch of sequences: one bisection for all
    # rows at once rather than a search per row (a spline's thousands of rows of bins)
    if seq.ndim > 1 or not bool((seq[..., 1:] >= seq[..., :-1]).all()):
        return (_bisect(xp, seq, vals, right).astype(dt),)
    return (xp.asarray(xp.searchsorted(seq, vals, side=s)).astype(dt),)


def _bisect(xp, seq, vals, right):
    """PyTorch's bisection step for step, every value at once (numpy's search, tuned for
    sorted keys, answers an unsorted sequence differently)."""
    n = seq.shape[-1]
    if vals.size == 0:
        return xp.zeros(vals.shape, np.int64)
    flat = seq.reshape(int(np.prod(seq.shape[:-1])), n)
    v = vals.reshape(flat.shape[0], -1)
    rows = xp.arange(flat.shape[0])[:, None]
    lo, hi = xp.zeros(v.shape, np.int64), xp.full(v.shape, n, np.int64)
    for _ in range(n.bit_length()):
        active = lo < hi
        mid = (lo + hi) >> 1
        at = flat[rows, xp.minimum(mid, n - 1)]
        up = active & ~((at > v) if right else (at >= v))
        lo, hi = xp.where(up, mid + 1, lo), xp.where(active & ~up, mid, hi)
    return lo.reshape(vals.shape)


def bucketize(input, boundaries, *, out_int32: bool = False, right: bool = False):
    """The bucket of each element of `input` among the sorted 1-D `boundaries`."""
    if boundaries.ndim != 1:
        raise ShapeError(f"bucketize: boundaries must be 1-D, got shape {tuple(boundaries.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)

