"""LayerNorm as a primitive, and its backward as another: the one definition of the op,
eager and captured.

Why: as a composite LayerNorm is seven eager op calls forward and about fifteen full-size
passes backward (3x PyTorch's time in the Transformer encoder step). Here the forward is
one op and the backward one op computing the gradients of x, weight and bias together,
stacked as one ``(M + 2, K)`` array (rows: dx, then dweight, dbias) that the VJP cuts
apart; without an affine (group_norm's and instance_norm's rows) it is dx alone, the
column sums skipped (about half of GroupNorm's backward). The CPU kernels are rendered
from their rows forms (compiler/cpu/kernels/row_forms.py).

``layer_norm_backward`` has a VJP of its own, written with differentiable ops that
recompute the row statistics from x, so every higher order is exact too.
"""
from __future__ import annotations

import math

from .. import dtypes as _dt
from ..errors import DTypeError, ShapeError
from .elementwise import rsqrt
from .reductions import mean, sum as _sum, sum_
from .registry import Aval, defprim
from .eager import bind, remember_plain
from .shape import reshape
from .normalization import check_dtypes
from .opmath import as_input, in_opmath

__all__ = ["layer_norm"]


def _stats(xp, x2, eps):
    """(x - mean, 1 / sqrt(var + eps)) per row of the (M, K) view."""
    if x2.shape[1] == 0:    # (empty rows: nothing to normalize; mean and var taken as 0)
        return x2.copy(), xp.full((x2.shape[0], 1), 1.0 / (eps ** 0.5), dtype=x2.dtype)
    d = x2 - x2.mean(axis=1, keepdims=True)
    var = xp.einsum("ij,ij->i", d, d) / x2.shape[1]
    rstd = 1.0 / xp.sqrt(var + eps)
    return d, rstd.astype(x2.dtype, copy=False)[:, None]


def row_size(x, n: int) -> int:
    """The elements of one normalized row: the product of `x`'s last `n` dims."""
    return math.prod(x.shape[x.ndim - n:])


def _rows(x, n: int) -> int:
    """The number of normalized rows: the product of `x`'s leading dims (explicit, since
    -1 cannot be inferred when a row is empty)."""
    return math.prod(x.shape[:x.ndim - n])


def _layer_norm_impl(xp, x, *wb, n, eps, affine):
    K = row_size(x, n)
    d, rstd = _stats(xp, x.reshape(_rows(x, n), K), eps)
    d *= rstd
    wb = list(wb)
    if affine[0]:
        d *= wb.pop(0).reshape(-1)
    if affine[1]:
        d += wb.pop(0).reshape(-1)
    return d.reshape(x.shape)


def _layer_norm_rule(x: Aval, *wb, n, eps, affine):
    ns = tuple(x.shape[len(x.shape) - n:])
    if not x.dtype.is_floating_point:
        raise DTypeError(f"layer_norm: expected a floating point input, got {x.dtype.name}")
    for name, a in zip(("weight", "bias"), wb):
        if tuple(a.shape) != ns:
            raise ShapeError(f"layer_norm: {name} of shape {tuple(a.shape)} does not match "
                             f"normalized_shape {ns}")
        if a.dtype is not x.dtype:
            raise DTypeError(f"layer_norm: {name} has dtype {a.dtype.name}, input {x.dtype.name}")
    return Aval(x.shape, x.dtype, x.device)


def _layer_norm_backward_impl(xp, g, x, *w, n, eps, has_w, sums=True):
    K = row_size(x, n)
    g2 = g.reshape(_rows(x, n), K)
    xhat, rstd = _stats(xp, x.reshape(_rows(x, n), K), eps)
    xhat *= rstd
    M = g2.shape[0]
    out = xp.empty((M + 2 * sums, K), dtype=x.dtype)
    if sums:
        out[M + 1] = g2.sum(axis=0)                                 # d bias
        out[M] = xp.einsum("ij,ij->j", g2, xhat)                    # d weight
    gw = out[:M]
    if has_w:
        xp.multiply(g2, w[0].reshape(-1), out=gw)
    else:
        gw[...] = g2
    if K == 0:
        return out
    # dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), per row
    m2 = (xp.einsum("ij,ij->i", gw, xhat) / K).astype(x.dtype, copy=False)[:, None]
    gw -= gw.mean(axis=1, keepdims=True)
    xhat *= m2
    gw -= xhat
    gw *= rstd
    return out


def _layer_norm_backward_rule(g: Aval, x: Aval, *w, n, eps, has_w, sums=True):
    return Aval((_rows(x, n) + 2 * sums, row_size(x, n)), x.dtype, x.device)


def _layer_norm_backward_vjp(v, out, g, x, *w, n, eps, has_w, sums=True):
    """VJP of ``(dx, dweight, dbias) = layer_norm_backward(g, x, w)`` for the cotangents
    (vx, vw, vb) (the rows of `v`; without `sums`, `v` is vx alone and vw = vb = 0). Per
    row, with xhat = (x - mean) * r and the projection
    P(u) = u - mean(u) - xhat * mean(u * xhat) (symmetric; LayerNorm's Jacobian is r P):
    dx = r P(g w), dweight = sum of g xhat, dbias = sum of g. So
      d/dg = w r P(vx) + vw xhat + vb,   d/dw = sum of g r P(vx),
      d/dx = r P(vw g) - r^2 (xhat (a - b c) + c P(vx) + b P(g w)),
    a = mean(vx g w) - mean(vx) mean(g w), b = mean(xhat vx), c = mean(xhat g w)
    (r's derivative is -r^2 xhat / K; those of b and c are r P(vx) / K and r P(g w) / K)."""
    dims = tuple(range(x.ndim - n, x.ndim))
    lead = tuple(range(x.ndim - n))
    ns = tuple(x.shape[x.ndim - n:])
    shape = tuple(x.shape)
    d = x - mean(x, dims, keepdim=True)
    r = rsqrt(mean(d * d, dims, keepdim=True) + eps)
    xh = d * r

    def P(u):
        return u - mean(u, dims, keepdim=True) - xh * mean(u * xh, dims, keepdim=True)

    def rowsum(t):
        return _sum(t, lead) if lead else t

    vx = reshape(v[:-2] if sums else v, shape)
    u = g * w[0] if has_w else g
    pv = P(vx)
    d_g = r * (pv * w[0] if has_w else pv)
    if sums:
        vw = reshape(v[-2], ns)
        d_g = d_g + vw * xh + reshape(v[-1], ns)
    d_w = rowsum(g * r * pv) if has_w else None
    a = mean(vx * u, dims, keepdim=True) - mean(vx, dims, keepdim=True) * mean(u, dims, keepdim=True)
    b = mean(xh * vx, dims, keepdim=True)
    c = mean(xh * u, dims, keepdim=True)
    t = r * r * (xh * (a - b * c) + c * pv + b * P(u))
    d_x = r * P(vw * g) - t if sums else -t
    return (d_g, d_x) + ((d_w,) if has_w else ())


def _layer_norm_backward_rows(g, x, *w, n, eps, has_w, sums=True):
    """The backward's rows form over (M, K) rows, optionally 1 / K as a last (1,) operand:
    (dx, dweight, dbias), the last two summed over the rows, kept as (1, K); dx alone
    without `sums`."""
    w = list(w)
    inv_k = w.pop() if len(w) > int(has_w) else 1.0 / x.shape[-1]
    lead = tuple(range(x.ndim - 1))
    d = x - _sum(x, -1, keepdim=True) * inv_k
    r = rsqrt(_sum(d * d, -1, keepdim=True) * inv_k + eps)
    xh = d * r
    gw = g * w[0] if has_w else g
    a = _sum(gw, -1, keepdim=True) * inv_k
    # mean(gw * xh) as r * mean(gw * d): a sum that needs only the mean, so it shares the
    # variance's pass (three passes over the row, not four)
    c = _sum(gw * d, -1, keepdim=True) * inv_k * r
    dx = r * (gw - a - xh * c)
    if not sums:
        return dx
    return dx, sum_(g * xh, lead, True), sum_(g, lead, True)


LAYER_NORM_BACKWARD = defprim("layer_norm_backward", _layer_norm_backward_impl, _layer_norm_backward_rule,
                              _layer_norm_backward_vjp, kind="other",
                              grad_name="NativeLayerNormBackwardBackward0",
                              extra={"rows_form": _layer_norm_backward_rows})


def _layer_norm_vjp(g, out, x, *wb, n, eps, affine):
    w = wb[0] if affine[0] else None
    # (no affine, as group_norm's and instance_norm's rows: dx alone, no column sums)
    sums = any(affine)
    res = bind(LAYER_NORM_BACKWARD, g, x, *((w,) if affine[0] else ()), n=n, eps=eps,
               has_w=affine[0], sums=sums)
    ns = tuple(x.shape[x.ndim - n:])
    grads = [reshape(res[:-2] if sums else res, tuple(x.shape))]
    if affine[0]:
        grads.append(reshape(res[-2], ns))
    if affine[1]:
        grads.append(reshape(res[-1], ns))
    return tuple(grads)


def _layer_norm_rows(x, *wb, n, eps, affine):
    # the numpy form's steps over the last dim, then optionally 1 / K as a (1,) operand so
    # one CPU kernel serves every row length; compiled plans inline 1 / K as a literal
    wb = list(wb)
    inv_k = wb.pop() if len(wb) > sum(affine) else 1.0 / x.shape[-1]
    d = x - _sum(x, -1, keepdim=True) * inv_k
    y = d * rsqrt(_sum(d * d, -1, keepdim=True) * inv_k + eps)
    if affine[0]:
        y = y * wb.pop(0)
    if affine[1]:
        y = y + wb.pop(0)
    return y


def _over_last_dim(x, *wb, n, **params) -> bool:
    """LayerNorm over the last dim only (a rows group's row): compiled plans schedule its
    rows form in its place (compiler/rowinline.py)."""
    return n == 1


LAYER_NORM = defprim("layer_norm", _layer_norm_impl, _layer_norm_rule, _layer_norm_vjp, kind="other",
                     save=lambda rq: tuple(range(len(rq))), grad_name="NativeLayerNormBackward0",
                     extra={"rows_form": _layer_norm_rows, "rows_inline": _over_last_dim})


def layer_norm(x, n: int, weight=None, bias=None, eps: float = 1e-5):
    """LayerNorm of `x` over its last `n` dims (weight and bias: that shape, or None).

    As PyTorch's: weight and bias share x's dtype, or are float32 for a float16 or bfloat16
    x, which is then normalized in float32 and the result rounded to its dtype once."""
    dt = x.dtype
    if (weight is not None and bias is not None and weight.dtype is dt and bias.dtype is dt
            and dt.is_floating_point and dt is not _dt.float16):
        # (nn.LayerNorm's call: dtypes that pass `check_dtypes` and need no float32 copy)
        return bind(LAYER_NORM, x, weight, bias, n=n, eps=float(eps), affine=_AFFINE[3])
    if dt.is_floating_point:
        check_dtypes("layer_norm", x, weight=weight, bias=bias)
    wb = [t for t in (weight, bias) if t is not None]
    affine = _AFFINE[2 * (weight is not None) + (bias is not None)]
    if x.dtype is _dt.float16 or any(t.dtype is not x.dtype for t in wb):
        # (float32 weights of a half x, or float16, whose squares overflow: in float32)
        wb = [in_opmath(t) for t in wb]
        return as_input(bind(LAYER_NORM, in_opmath(x), *wb, n=n, eps=float(eps), affine=affine), x)
    return bind(LAYER_NORM, x, *wb, n=n, eps=float(eps), affine=affine)


# the `affine` param by 2 * (has weight) + (has bias): the same tuples each call, which
# bind takes without checking their items (eager.remember_plain)
_AFFINE = ((False, False), (False, True), (True, False), (True, True))
for _a in _AFFINE:
    remember_plain(_a)
