"""log_softmax as one primitive, and its input gradient as another: the one definition of
the op, eager, traced and compiled.

Why: PyTorch's log_softmax saves its output, not its input, for the backward
(``g - exp(y) * sum(g)``), so writing in place into the input after the call (a
cross-entropy's logits, say) leaves the gradient alone. Over the last dim compiled plans
schedule the rows forms (``extra["rows_form"]``) in the primitives' place, as for softmax
(compiler/rowinline.py); eager calls run kernels rendered from them, the backward's
included, over a dim before the last in lanes (compiler/cpu/kernels/lane_forms.py).

Rows as PyTorch computes them: the shift is the row's max, so a row of -inf or holding
+inf gives nan. float16 is computed in float32 and rounded once (bfloat16 is widened by
the eager path).
"""
from __future__ import annotations

from ..errors import UnsupportedDTypeError
from .registry import Aval, defprim, shift_dims
from .eager import bind
from .elementwise import exp as _exp, log as _log
from .reductions import amax as _amax, sum as _sum
from .softmax_prim import on_last_dim

__all__ = ["log_softmax", "log_softmax_backward", "LOG_SOFTMAX", "LOG_SOFTMAX_BACKWARD"]


def _impl(xp, x, *, dim):
    xw = x.astype(xp.float32) if x.dtype == xp.float16 else x
    with xp.errstate(divide="ignore", invalid="ignore"):   # (inf - inf: nan, as PyTorch's)
        z = xw - xw.max(axis=dim, keepdims=True)
        s = xp.exp(z).sum(axis=dim, keepdims=True)
        xp.log(s, out=s)
        z -= s
    return z.astype(x.dtype) if z.dtype != x.dtype else z


def _rule(x: Aval, *, dim):
    if not x.dtype.is_floating_point:
        raise UnsupportedDTypeError(f"log_softmax: expected a floating point tensor, got {x.dtype.name}")
    if not 0 <= dim < max(len(x.shape), 1):
        raise IndexError(f"log_softmax: dim {dim} out of range for a tensor of rank {len(x.shape)}")
    return Aval(x.shape, x.dtype, x.device)


def _on_last_dim(x, *rest, dim) -> bool:
    """softmax's test, for float32/float64 rows alone (the numpy form widens float16)."""
    return on_last_dim(x, dim=dim) and x.dtype.name in ("float32", "float64")


def _rows(x, *, dim):
    # the numpy form's steps, in its order (over the last dim: checked by `_on_last_dim`)
    z = x - _amax(x, -1, keepdim=True)
    return z - _log(_sum(_exp(z), -1, keepdim=True))


LOG_SOFTMAX = defprim("log_softmax", _impl, _rule,
                      lambda g, out, x, *, dim: (log_softmax_backward(g, out, dim),), kind="other",
                      save=lambda rq: (), save_out=True, grad_name="LogSoftmaxBackward0",
                      extra={"rows_form": _rows, "rows_inline": _on_last_dim, "batch": shift_dims,
                             "row_major": True})


# ---------------------------------------------------------------- the gradient
def _bwd_impl(xp, g, y, *, dim):
    gw = g.astype(xp.float32) if g.dtype == xp.float16 else g
    out = xp.exp(y.astype(gw.dtype, copy=False))
    out *= gw.sum(axis=dim, keepdims=True)
    xp.subtract(gw, out, out=out)
    return out.astype(y.dtype) if out.dtype != y.dtype else out


def _bwd_rule(g: Aval, y: Aval, *, dim):
    if tuple(g.shape) != tuple(y.shape):
        raise ValueError(f"log_softmax_backward: gradient of shape {tuple(g.shape)} for a result "
                         f"of shape {tuple(y.shape)}")
    return Aval(y.shape, y.dtype, y.device)


def _bwd_vjp(v, out, g, y, *, dim):
    # B(g, y) = g - exp(y) * sum(g) along dim: v^T dB/dg = v - sum(v * exp(y));
    # v^T dB/dy = -v * exp(y) * sum(g)
    p = _exp(y)
    d_g = v - _sum(v * p, dim, keepdim=True) if g is not None else None
    d_y = -(v * p) * _sum(g, dim, keepdim=True) if g is not None and y is not None else None
    return d_g, d_y


def _bwd_rows(g, y, *, dim):
    return g - _exp(y) * _sum(g, -1, keepdim=True)


LOG_SOFTMAX_BACKWARD = defprim("log_softmax_backward", _bwd_impl, _bwd_rule, _bwd_vjp, kind="other",
                               save=lambda rq: (0, 1), grad_name="LogSoftmaxBackwardDataBackward0",
                               extra={"rows_form": _bwd_rows, "rows_inline": _on_last_dim, "batch": shift_dims})


def log_softmax(x, dim: int):
    """``x - log(sum(exp(x), dim))`` along `dim` (a normalized dim index)."""
    return bind(LOG_SOFTMAX, x, dim=dim)


def log_softmax_backward(g, y, dim: int):
    """``g - exp(y) * sum(g, dim)``: the input gradient of ``log_softmax`` for result `y`,
    output gradient `g`."""
    return bind(LOG_SOFTMAX_BACKWARD, g, y, dim=dim)
