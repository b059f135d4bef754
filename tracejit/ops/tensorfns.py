"""Tensor functions programs reach for: tril/triu, sort/argsort/topk, multinomial, cumprod.

``argsort``, ``multinomial`` and ``cumprod`` are primitives (a sort or a draw cannot be
written with the other ops); everything else is a composite: ``sort`` and ``topk``
gather the values at the sorted indices, so their gradient is gather's (scattered back
to where each value came from), and ``tril``/``triu`` are a `where` over an index mask.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled
from ..errors import ArgumentError, ShapeError, expect_not_bool
from ..shapes import Sym, normalize_dim
from .creation import arange
from .elementwise import where
from .indexing import gather
from .reductions import ValuesIndices, _accumulate, _cumsum_rule, _rev_cumsum, cumulative
from .registry import Aval, defprim, trace_state
from . import eager as _eager
from ..tensor import Tensor
from .eager import bind
from .shape import transpose, unsqueeze
from .shape_params import size_arg

__all__ = ["tril", "triu", "argsort", "sort", "topk", "multinomial", "cumprod"]


# ---------------------------------------------------------------- tril / triu
def _tri_mask(a, diagonal: int, lower: bool):
    if a.ndim < 2:
        raise ShapeError(f"{'tril' if lower else 'triu'}: expected a tensor with at least 2 dims, "
                         f"got shape {tuple(a.shape)}")
    d = a._data
    if type(d) is np.ndarray and type(diagonal) is int and not _eager._tracers_active:
        # eagerly a constant of the last two sizes (no operand needs a gradient): numpy's
        # tri, one array instead of six ops (a causal mask per attention call)
        n, m = d.shape[-2:]
        return Tensor._wrap(_tri(n, m, diagonal, lower), _dt.bool_, a.device)
    rows = unsqueeze(arange(a.shape[-2], device=a.device), 1)
    cols = unsqueeze(arange(a.shape[-1], device=a.device), 0)
    # a symbolic diagonal (``tril(diagonal=L - T)`` over a growing cache) stays symbolic
    diagonal = diagonal if isinstance(diagonal, Sym) else int(diagonal)
    return (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)


# Eager masks by (rows, cols, diagonal, lower), read-only: a causal mask is built per
# attention call, and numpy's tri of a (5, 20) mask cost half of tril's 7.5 us.
_TRI: dict = {}
_TRI_MAX = 256              # masks kept; past that the cache starts over
_TRI_MAX_ELEMENTS = 1 << 16  # larger masks are built per call (their pass outweighs the build)


def _tri(n: int, m: int, diagonal: int, lower: bool):
    key = (n, m, diagonal, lower)
    keep = _TRI.get(key)
    if keep is None:
        keep = np.tri(n, m, diagonal, dtype=bool) if lower else ~np.tri(n, m, diagonal - 1, dtype=bool)
        if n * m <= _TRI_MAX_ELEMENTS:
            keep.flags.writeable = False   # (shared by every call: nothing may write it)
            if len(_TRI) >= _TRI_MAX:
                _TRI.clear()
            _TRI[key] = keep
    return keep


def tril(a, diagonal: int = 0):
    """Lower triangle of the last two dims (elements with col - row <= diagonal)."""
    return _row_major(where(_tri_mask(a, diagonal, True), a, _zero(a)))


def triu(a, diagonal: int = 0):
    """Upper triangle of the last two dims (elements with col - row >= diagonal)."""
    return _row_major(where(_tri_mask(a, diagonal, False), a, _zero(a)))


def _row_major(out):
    """`out` row-major, as PyTorch's tril/triu are (`where` follows a transposed input's
    layout); a capture's results are row-major already."""
    return out if trace_state.tracer is not None or out.is_contiguous() else out.contiguous()


def _zero(a):
    """The zero of `a`'s dtype as a scalar that keeps it (a boolean mask stays boolean)."""
    return False if a.dtype is _dt.bool_ else 0


# ---------------------------------------------------------------- sorting
def _argsort_impl(xp, a, dim, descending, stable, k=None):
    if k is not None:   # the first k of the order (topk)
        if k == 1 and descending and a.dtype.kind in "biuf":
            # the stable order's first: the first maximum, NaN as the largest (an argmax,
            # not a sort)
            # (the method: np.argmax's wrapper costs a third of a short row's call)
            return a.argmax(axis=dim, keepdims=True) if xp is np else xp.argmax(a, axis=dim, keepdims=True)
        lead = _leading(a, dim, descending, k) if xp is np else None
        if lead is not None:
            return lead
        order = _argsort_impl(xp, a, dim, descending, stable)
        return xp.ascontiguousarray(order[(slice(None),) * (dim % a.ndim) + (slice(0, k),)])
    if xp is np and a.dtype in _PACKED and a.size >= _PACKED_MIN and 8 <= a.shape[dim] < 1 << 32:
        return _packed_argsort(a, dim, descending)
    if not descending:
        return xp.argsort(a, axis=dim, kind="stable")
    # Stable descending order (ties keep their original order, NaN first as the
    # largest): sort the reversed array ascending, then reverse the result.
    # (reversed by a slice: the same view as xp.flip, without its axis normalization,
    # which cost more than the sort of a small row)
    dim %= a.ndim
    n = a.shape[dim]
    rev = (slice(None),) * dim + (slice(None, None, -1),)
    idx = xp.argsort(a[rev], axis=dim, kind="stable")
    return (n - 1) - idx[rev]


# dtypes of at most 32 bits whose stable sort numpy runs as a merge sort (narrower integers
# and bool take its radix sort, already fast)
_PACKED = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32), np.dtype(np.uint32))
_PACKED_MIN = 2048   # elements below which (or rows under 8 long) the packing costs more
_SIGN = np.uint32(1 << 31)
_LOW = np.uint64(0xFFFFFFFF)


def _packed_argsort(a, dim: int, descending: bool):
    """The stable order of `a` along `dim` as numpy's unstable (SIMD) sort of one uint64 per
    element: the value's order-preserving 32-bit key above its position, so no two are
    equal and ties come out in input order (a (256, 255) float32 argsort: ~5x faster than
    numpy's stable merge sort). Floats: -0.0 keys as 0.0 and every NaN as the largest,
    where numpy's sort puts them; descending takes the complement of the key."""
    if a.dtype.kind == "f":
        a = a.astype(np.float32) + np.float32(0)     # (-0.0 + 0.0 is 0.0; a float16 widens exactly)
        bits = a.view(np.uint32)
        # negative values: every bit flipped; others: the sign bit set
        key = (a.view(np.int32) >> 31).view(np.uint32)
        key |= _SIGN
        key ^= bits
        nan = np.isnan(a)
        if nan.any():
            key[nan] = 0xFFFFFFFF
    else:
        key = a.view(np.uint32) ^ _SIGN if a.dtype.kind == "i" else a.astype(np.uint32, copy=True)
    if descending:
        np.invert(key, out=key)
    n = a.shape[dim]
    at = [1] * a.ndim
    at[dim] = n
    packed = key.astype(np.uint64)
    packed <<= np.uint64(32)
    packed |= np.arange(n, dtype=np.uint64).reshape(at)
    packed.sort(axis=dim)
    packed &= _LOW
    return packed.astype(np.int64)


PARTIAL_SORT_SIZE = 1 << 14


def _leading(a, dim: int, descending: bool, k: int):
    """The first `k` indices of the stable order of `a` along `dim` (ties in input order)
    from a partial sort (``argpartition``, then a sort of the k), where `k` is a small part
    of the dim; None (sort it all) otherwise, where NaN is present, or where a row has more
    values equal to its k-th than the k hold. Below `PARTIAL_SORT_SIZE` elements the sort
    is faster."""
    n = a.shape[dim]
    if (not 0 < k * 4 < n or a.size < PARTIAL_SORT_SIZE or a.dtype.kind not in "fiu"
            or (a.dtype.kind == "f" and np.isnan(a).any())):
        return None
    x = np.moveaxis(a, dim, -1)
    lead = x.shape[:-1]
    x = x.reshape(-1, n)
    part = slice(n - k, n) if descending else slice(0, k)
    cols = np.argpartition(x, n - k if descending else k - 1, axis=1)[:, part]
    cols.sort(axis=1)                                     # the k, in input order
    vals = np.take_along_axis(x, cols, 1)
    kth = vals.min(axis=1, keepdims=True) if descending else vals.max(axis=1, keepdims=True)
    if ((x == kth).sum(axis=1) != (vals == kth).sum(axis=1)).any():
        return None
    order = _argsort_impl(np, vals, 1, descending, True)
    idx = np.take_along_axis(cols, order, 1).reshape(lead + (k,))
    return np.ascontiguousarray(np.moveaxis(idx, -1, dim))


def _argsort_rule(a, dim, descending, stable, k=None):
    if k is None:
        return Aval(a.shape, _dt.int64, a.device)
    return Aval(a.shape[:dim] + (k,) + a.shape[dim + 1:], _dt.int64, a.device)


ARGSORT = defprim("argsort", _argsort_impl, _argsort_rule, kind="other")


def argsort(a, dim: int = -1, descending: bool = False, stable: bool = False, *, axis=None):
    """Indices that sort `a` along `dim` (always a stable sort: ties keep input order)."""
    dim = dim if axis is None else axis
    if a.ndim == 0:
        return bind(ARGSORT, unsqueeze(a, 0), dim=0, descending=bool(descending), stable=True)[0]
    d = normalize_dim(dim, a.ndim, "argsort")
    return bind(ARGSORT, a, dim=d, descending=bool(descending), stable=True)


def sort(a, dim: int = -1, descending: bool = False, stable: bool = False, *, axis=None):
    """(values, indices) of `a` sorted along `dim`; gradients flow to the values."""
    dim = dim if axis is None else axis
    if a.ndim == 0:
        return ValuesIndices(a, argsort(a))
    d = normalize_dim(dim, a.ndim, "sort")
    idx = argsort(a, d, descending)
    return ValuesIndices(gather(a, d, idx), idx)


def topk(a, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, axis=None):
    """The k largest (or smallest) values along `dim` and their indices, best first."""
    expect_not_bool("topk", "input", a)
    dim = dim if axis is None else axis
    d = normalize_dim(dim, max(a.ndim, 1), "topk")
    n = a.shape[d] if a.ndim else 1
    k = size_arg(k)   # (a symbolic k, a changing int argument's too: a symbolic output size)
    k = k if isinstance(k, Sym) else int(k)
    if not 0 <= k <= n:
        raise ShapeError(f"topk: k ({k}) is out of range for dim {dim} of size {n}")
    if a.ndim == 0:
        return ValuesIndices(a, argsort(a))
    idx = bind(ARGSORT, a, dim=d, descending=bool(largest), stable=True, k=k)
    return ValuesIndices(gather(a, d, idx), idx)


# ---------------------------------------------------------------- multinomial
def _multinomial_impl(xp, p, num_samples, replacement):
    from . import random as R  # R._gen is rebound by manual_seed: read it at call time
    probs = p.reshape(-1, p.shape[-1]).astype(np.float64)
    rows, n = probs.shape
    total = probs.sum(axis=1, keepdims=True)
    # (three reductions: the min is NaN where a value is, an infinite value makes its
    # row's total infinite; more checks would be most of a small draw's cost)
    low = float(probs.min()) if probs.size else 1.0
    if probs.size and not (low >= 0.0 and float(total.max()) < np.inf):
        raise ValueError("multinomial: probabilities must be finite and non-negative")
    if total.size and not float(total.min()) > 0.0:
        raise ValueError("multinomial: every row of probabilities must have a positive sum")
    # (one sample needs one positive value a row, which a positive total of non-negative
    # values has; count_nonzero: a bool array's sum casts it, 4x the count)
    if not replacement and num_samples > 1 and num_samples > int(np.count_nonzero(probs, axis=1).min()):
        raise ArgumentError(f"multinomial: cannot draw {num_samples} samples without replacement "
                         f"from a row with fewer non-zero probabilities")
    draw = R._gen if xp is np else xp.random
    if replacement:
        # Invert each row's CDF; shifting row r by r makes one sorted array, so a single
        # searchsorted serves all rows.
        shift = xp.arange(rows, dtype=np.float64)[:, None]
        cdf = xp.cumsum(probs, axis=1) / total + shift
        u = draw.random((rows, num_samples)) + shift
        idx = xp.searchsorted(cdf.ravel(), u.ravel(), side="right").reshape(rows, num_samples)
        idx = xp.minimum(idx - xp.arange(rows)[:, None] * n, n - 1)
    else:
        # Exponential race: the k smallest E_i / p_i (E ~ Exp(1)) are a draw without
        # replacement with probabilities proportional to p (zero-probability keys are inf).
        keys = draw.standard_exponential((rows, n))
        if low > 0.0:   # (no zero to divide by: errstate costs 4 us, the division 0.7)
            keys /= probs
        else:
            with np.errstate(divide="ignore"):
                keys /= probs
        if num_samples == 1:   # (the stable order's first: the first smallest key)
            idx = xp.argmin(keys, axis=1)[:, None]
        else:
            idx = xp.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    return xp.ascontiguousarray(idx.reshape(p.shape[:-1] + (num_samples,)), dtype=np.int64)


def _multinomial_rule(p, num_samples, replacement):
    if p.ndim not in (1, 2):
        raise ShapeError(f"multinomial: expected a 1-D or 2-D tensor of probabilities, got shape "
                         f"{tuple(p.shape)}")
    if not p.dtype.is_floating_point:
        raise TypeError(f"multinomial: probabilities must be floating point, got {p.dtype.name}")
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    return Aval(tuple(p.shape[:-1]) + (num_samples,), _dt.int64, p.device)


MULTINOMIAL = defprim("multinomial", _multinomial_impl, _multinomial_rule, kind="random")


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):
    """Indices drawn from each row of (unnormalised) probabilities `input`, from the
    generator `tracejit.manual_seed` seeds, or from `generator`."""
    if generator is not None:
        from .random import drawing_from
        with drawing_from(generator, "multinomial"):
            return multinomial(input, num_samples, replacement)
    return bind(MULTINOMIAL, input, num_samples=int(num_samples), replacement=bool(replacement))


# ---------------------------------------------------------------- cumprod
def _cumprod_vjp(g, out, a, dim):
    # d out_j / d a_i = prod_{k<=j, k!=i} a_k (j >= i). Before a row's first zero z that
    # is out_j / a_i, and every term j >= z has a zero factor: grad_i = sum_{j<z} g_j out_j
    # / a_i. At z the division fails; grad_z = prod_{k<z} a_k * sum_{z<=j<z2} g_j
    # prod_{z<k<=j} a_k, z2 the second zero. Past z every term has a zero factor: 0. The
    # terms are picked, not multiplied by 0, so an inf beside a zero gives PyTorch's
    # gradient, not nan.
    from .reductions import cumsum
    from .elementwise import cast
    n = a.shape[dim]
    if isinstance(n, int) and n == 1:
        return (g,)     # (each output is its input: no division, so an inf gives no nan)
    # create_graph beside a zero (or unknown data): PyTorch's n^2 form, differentiable there
    if isinstance(n, int) and is_grad_enabled() and (a._data is None or bool((a == 0).any())):
        return (_cumprod_vjp_differentiable(g, a, dim, n),)
    if a._data is not None and not bool((a == 0).any()):
        # no zero (the common case): only the division form, one accumulate instead of
        # five; the same values the picked form gives there
        return (_rev_cumsum(g * out, dim) / a,)
    zero = a == 0
    seen = cumsum(cast(zero, _dt.int64), dim)      # zeros up to and including j
    first_zero = zero & (seen == 1)
    after = seen >= 1
    safe_a = where(zero, 1.0, a)
    nonzero_grad = _rev_cumsum(where(after, 0.0, g * out), dim) / safe_a
    between = cumprod(where((seen == 0) | first_zero, 1.0, a), dim)    # prod_{z<k<=j} a_k
    zero_grad = cumprod(where(after, 1.0, a), dim) * _rev_cumsum(where(seen <= 1, g * between, 0.0), dim)
    return (where(first_zero, zero_grad, where(after, 0.0, nonzero_grad)),)


def _cumprod_vjp_differentiable(g, a, dim: int, n: int):
    """grad_i = sum_{j>=i} g_j prod_{k<=j, k!=i} a_k as one cumprod over an (n, n) copy
    of each row, a_i set to 1 in row i: no division and no picked constants, so its own
    derivative (a second derivative of cumprod) is exact where `a` has zeros."""
    al, gl = transpose(a, dim, -1), transpose(g, dim, -1)
    k = arange(n, device=a.device)
    rows, cols = unsqueeze(k, 1), unsqueeze(k, 0)
    e = cumprod(where(rows == cols, 1.0, unsqueeze(al, -2)), -1)    # (..., i, j)
    return transpose(where(cols >= rows, unsqueeze(gl, -2) * e, 0.0).sum(-1), dim, -1)


CUMPROD = defprim("cumprod", lambda xp, a, dim: _accumulate(xp, np.multiply, "cumprod", a, dim), _cumsum_rule, _cumprod_vjp,
                  kind="other", save=lambda rq: (0,), save_out=True)


def cumprod(a, dim: int = None, *, dtype=None, axis=None):
    """Cumulative product along `dim` (gradient exact also where `a` has zeros)."""
    return cumulative(CUMPROD, a, dim if axis is None else axis, dtype)
