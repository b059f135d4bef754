"""Cross-entropy over class indices as one primitive, and its input gradient as another:
``cross_entropy(x, target)`` for (N, C) logits, integer targets, no class weights and no
label smoothing (composite.py's ``cross_entropy`` keeps its composite for other forms).

Why: as a composite an eager cross-entropy is about a dozen op calls forward and as many
autograd nodes backward (~0.27 ms for 256x10 logits, against some 10 us of arithmetic).

Values follow PyTorch's ``log_softmax`` + ``nll_loss``: ``-logp[target]`` per row (0 for
`ignore_index`), reduced by mean over the counted rows (nan when none is), sum, or none.
The input gradient is ``(softmax(x) - onehot) * r`` with ``r = g * valid / count`` (mean)
or ``g * valid``; its own VJP is written with tracejit ops. On the CPU both run a kernel
rendered from their rows forms (``extra["rows_form"]``).
"""
from __future__ import annotations

import math

import numpy as np

from ..device import CPU, module_of
from ..errors import DTypeError, ShapeError
from .registry import Aval, defprim
from .eager import bind

__all__ = ["cross_entropy_indices", "cross_entropy_backward", "nll_indices", "nll_indices_backward",
           "applies"]

_REDUCTIONS = ("mean", "sum", "none")


def applies(input, target, weight, label_smoothing: float, *, nll: bool = False) -> bool:
    """Does the primitive cover this call? (N, C) float32/float64 logits on the CPU (its
    numpy form is written for numpy), 1-D integer targets, no weight, no smoothing;
    composite.py keeps the rest. `nll`: nll_loss's, which takes (N, C, d1, ...) scores
    with (N, d1, ...) targets too."""
    rank = input.ndim >= 2 if nll else input.ndim == 2
    return (weight is None and label_smoothing == 0.0 and rank and target.ndim == input.ndim - 1
            and input.device == CPU
            and input.shape[1] > 0 and target.dtype.is_integer
            and input.dtype.name in ("float32", "float64"))


def check_range(t: np.ndarray, valid: np.ndarray, c: int) -> None:
    """PyTorch rejects a class index outside [0, C) that is not `ignore_index`; the
    message is nll_loss's (gather_prim.py ``in_range``)."""
    if t.size == 0:
        return
    bad = ((t < 0) | (t >= c)) & valid
    if bad.any():
        v = t[bad]
        lo = int(v.min())
        from ..errors import IndexRangeError
        raise IndexRangeError(f"nll_loss: index {lo if lo < 0 else int(v.max())} is out of range for size {c}")


def _targets(t: np.ndarray, c: int, ignore_index: int, check: bool = True):
    """(the rows counted, targets safe to index with: 0 where a row is ignored)."""
    t = t.astype(np.int64, copy=False)
    valid = t != ignore_index
    if check:
        check_range(t, valid, c)
    return valid, (t if valid.all() else np.where(valid, t, 0))


def _rows(x: np.ndarray, t: np.ndarray, ignore_index: int):
    """(z = x - rowmax, per-row sum(exp(z)) as (N, 1), e = exp(z), valid, safe targets)."""
    valid, safe = _targets(t, x.shape[1], ignore_index)
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return z, e.sum(axis=1, keepdims=True), e, valid, safe


def reduce_losses(loss, total, count, reduction, dtype):
    if reduction == "none":
        return loss
    # (methods, not np.asarray: `total` may be a device array's 0-d sum)
    if reduction == "sum":
        return total.astype(dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total / count).astype(dtype)   # 0 counted: nan, as PyTorch


def _reduced(loss, valid, reduction: str):
    """The per-row losses with the ignored rows' set to 0, reduced."""
    if not valid.all():
        loss[~valid] = 0.0
    return reduce_losses(loss, loss.sum(dtype=np.float64), np.count_nonzero(valid), reduction, loss.dtype)


def _row_scale_np(g, dtype, valid, reduction: str):
    """r = g * valid / count (mean; none counted: 0, as PyTorch) or g * valid, per row."""
    r = g.astype(dtype).reshape(-1) * valid
    return r / dtype.type(max(int(valid.sum()), 1)) if reduction == "mean" else r


def _ce_impl(xp, x, t, *, ignore_index=-100, reduction="mean"):
    z, s, _, valid, safe = _rows(x, t, ignore_index)
    loss = -(z[module_of(x).arange(x.shape[0]), safe] - np.log(s[:, 0]))   # -logp at the target
    return _reduced(loss, valid, reduction)


def _ce_rule(x: Aval, t: Aval, *, ignore_index=-100, reduction="mean"):
    if not x.dtype.is_floating_point:
        raise DTypeError(f"cross_entropy: expected floating point logits, got {x.dtype.name}")
    if not t.dtype.is_integer:
        raise TypeError(f"cross_entropy: target must hold class indices (integer), got {t.dtype.name}")
    if len(x.shape) != 2 or len(t.shape) != 1 or x.shape[0] != t.shape[0]:
        raise ShapeError(f"nll_loss: expected input (N, C) and target (N,), got {tuple(x.shape)} "
                         f"and {tuple(t.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return Aval((x.shape[0],) if reduction == "none" else (), x.dtype, x.device)


def _ce_rows(x, t, classes, *, ignore_index=-100, reduction="mean"):
    """The per-row losses, (N, 1), of logits `x` (N, C) against targets `t` (N, 1) given the
    class indices `classes` (1, C): the rows form the CPU kernel is rendered from."""
    from .elementwise import exp, log, where
    from .reductions import amax, sum as _sum
    z = x - amax(x, -1, keepdim=True)
    # z at the target; -inf for a target outside [0, C), whose loss is then inf: the
    # caller's one check of the total finds it (no range check before the kernel)
    picked = amax(where(classes == t, z, -math.inf), -1, keepdim=True)
    loss = log(_sum(exp(z), -1, keepdim=True)) - picked
    return where(t == ignore_index, 0.0, loss)


def _batch_rows(prim):
    """A batching rule (registry ``extra["batch"]``) of these losses and their gradients:
    the batch's rows as one call's, reduction 'none', reduced per sample after (nll's
    (N, C, d1, ...) form: the same, its trailing dims carried along)."""
    def rule(n, params, *avals):
        red, ign = params.get("reduction", "mean"), params.get("ignore_index", -100)

        def run(*ops):
            *g, x, t = ops
            rows, kw = x.shape[1], {"ignore_index": ign, "reduction": "none"}
            lead, rest = (n, rows), tuple(t.shape[2:])
            flat = (x.reshape((n * rows,) + tuple(x.shape[2:])), t.reshape((n * rows,) + rest))
            count = (t != ign).reshape(n, -1).sum(1).to(x.dtype)
            if not g:
                out = bind(prim(), *flat, **kw).reshape(lead + rest)
                if red == "none":
                    return out
                return out.reshape(n, -1).sum(1) / (count if red == "mean" else 1)
            r = g[0] / count.clamp(min=1) if red == "mean" else g[0]
            r = r if red == "none" else r.reshape((n,) + (1,) * (len(rest) + 1)).expand(lead + rest)
            return bind(prim(), r.reshape((n * rows,) + rest), *flat, **kw).reshape(x.shape)
        return run
    return rule


CROSS_ENTROPY = defprim("cross_entropy", _ce_impl, _ce_rule,
                        lambda g, out, x, t, **p: (cross_entropy_backward(g, x, t, **p), None),
                        kind="other",
                        save=lambda rq: (0, 1), nondiff=(1,), grad_name="NllLossBackward0",
                        extra={"rows_form": _ce_rows, "batch": _batch_rows(lambda: CROSS_ENTROPY)})


def _ce_backward_impl(xp, g, x, t, *, ignore_index=-100, reduction="mean"):
    _, s, e, valid, safe = _rows(x, t, ignore_index)
    r = _row_scale_np(g, x.dtype, valid, reduction)
    e /= s                                       # softmax
    e *= r[:, None]
    e[module_of(x).arange(x.shape[0]), safe] -= r    # - onehot * r
    return e


def _ce_backward_rule(g: Aval, x: Aval, t: Aval, *, ignore_index=-100, reduction="mean"):
    want = (x.shape[0],) + tuple(x.shape[2:]) if reduction == "none" else ()
    if tuple(g.shape) != want:
        raise ShapeError(f"cross_entropy_backward: output gradient of shape {tuple(g.shape)}, "
                         f"expected {want}")
    return Aval(x.shape, x.dtype, x.device)


def _row_scale(g, t, ignore_index, reduction):
    """r = g * valid / count (mean) or g * valid, as an (N, 1) tensor."""
    from .elementwise import cast, maximum, ne
    from .reductions import sum as _sum
    from .shape import unsqueeze
    valid = cast(ne(t, ignore_index), g.dtype)
    if reduction == "none":
        return unsqueeze(g * valid, 1)
    r = unsqueeze(valid, 1) * g
    return r / maximum(_sum(valid), 1.0) if reduction == "mean" else r   # (every row ignored: 0)


def _ce_backward_vjp(v, out, g, x, t, *, ignore_index=-100, reduction="mean"):
    # dx = (softmax(x) - onehot) * r(g) is linear in g and, through softmax, smooth in x:
    # d/dg <v, dx> = <v, dx(g=1)> summed per row (none) or in all; d/dx = softmax's
    # backward of v * r at y = softmax(x).
    from .reductions import sum as _sum
    from .softmax_prim import softmax, softmax_backward
    from .creation import ones_like
    d_g = d_x = None
    if g is not None:
        unit = cross_entropy_backward(ones_like(g), x, t, ignore_index, reduction)
        d_g = _sum(v * unit, 1) if reduction == "none" else _sum(v * unit)
        d_x = softmax_backward(v * _row_scale(g, t, ignore_index, reduction), softmax(x, 1), 1)
    return d_g, d_x, None


def _ce_backward_rows(x, t, classes, g, div, *, ignore_index=-100, reduction="mean"):
    """The input gradient of `_ce_rows` for output gradient `g` ((N, 1), or (1, 1)) divided
    by `div` ((1, 1): the count of counted rows for a mean, else 1): its rows form."""
    from .elementwise import exp, where
    from .reductions import amax, sum as _sum
    e = exp(x - amax(x, -1, keepdim=True))
    r = where(t == ignore_index, 0.0, g) / div
    return e / _sum(e, -1, keepdim=True) * r - where(classes == t, r, 0.0)


CROSS_ENTROPY_BACKWARD = defprim("cross_entropy_backward", _ce_backward_impl, _ce_backward_rule,
                                 _ce_backward_vjp, kind="other", save=lambda rq: (0, 1, 2),
                                 nondiff=(2,), grad_name="NllLossBackwardBackward0",
                                 extra={"rows_form": _ce_backward_rows,
                                        "batch": _batch_rows(lambda: CROSS_ENTROPY_BACKWARD)})


def cross_entropy_indices(x, target, ignore_index: int = -100, reduction: str = "mean"):
    """The mean / sum / per-row cross-entropy of (N, C) logits `x` against class indices
    `target` (N,), rows whose target is `ignore_index` left out."""
    return bind(CROSS_ENTROPY, x, target, ignore_index=int(ignore_index), reduction=reduction)


def cross_entropy_backward(g, x, target, ignore_index: int = -100, reduction: str = "mean"):
    """The input gradient of ``cross_entropy_indices(x, target)`` for output gradient `g`."""
    return bind(CROSS_ENTROPY_BACKWARD, g, x, target, ignore_index=int(ignore_index),
                reduction=reduction)


# ------------------------------------------------- nll_loss over log-probabilities
# What a cross-entropy that records a graph runs after ``log_softmax`` (as PyTorch's,
# whose backward reads log_softmax's result, not the logits: a later in-place write into
# the logits leaves the gradient alone); also ``nll_loss`` itself for (N, C) input.

def _at_targets(xp, lp, safe):
    """The index of each target's score in `lp` (N, C, d1, ...): a fancy index of rows
    and classes for (N, C); for more dims the flat positions, class c of position i
    being i's flat position in the targets plus c times their per-sample size."""
    if lp.ndim == 2:
        return xp.arange(lp.shape[0]), safe
    inner = math.prod(lp.shape[2:])
    pos = xp.arange(safe.size).reshape(safe.shape)
    return pos + (pos // inner) * ((lp.shape[1] - 1) * inner) + safe * inner


def _nll_impl(xp, lp, t, *, ignore_index=-100, reduction="mean"):
    valid, safe = _targets(t, lp.shape[1], ignore_index)
    at = _at_targets(xp, lp, safe)
    picked = lp[at] if lp.ndim == 2 else xp.ascontiguousarray(lp).reshape(-1)[at]
    return _reduced(-picked, valid, reduction)


def _nll_rule(lp: Aval, t: Aval, *, ignore_index=-100, reduction="mean"):
    if len(lp.shape) == 2:
        return _ce_rule(lp, t, ignore_index=ignore_index, reduction=reduction)
    if not lp.dtype.is_floating_point:
        raise DTypeError(f"nll_loss: expected floating point input, got {lp.dtype.name}")
    if not t.dtype.is_integer:
        raise TypeError(f"nll_loss: target must hold class indices (integer), got {t.dtype.name}")
    want = (lp.shape[0],) + tuple(lp.shape[2:])
    if len(lp.shape) < 2 or tuple(t.shape) != want:
        raise ShapeError(f"nll_loss: expected input (N, C, ...) and target (N, ...), got "
                         f"{tuple(lp.shape)} and {tuple(t.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return Aval(want if reduction == "none" else (), lp.dtype, lp.device)


# (the input is kept although its gradient reads only its shape: PyTorch's NllLossBackward0
# saves it, so writing into it before backward() raises there too)
NLL_INDICES = defprim("nll_indices", _nll_impl, _nll_rule,
                      lambda g, out, lp, t, **p: (nll_indices_backward(g, lp, t, **p), None),
                      kind="other",
                      save=lambda rq: (0, 1), nondiff=(1,), grad_name="NllLossBackward0",
                      extra={"batch": _batch_rows(lambda: NLL_INDICES)})


def _nll_backward_impl(xp, g, lp, t, *, ignore_index=-100, reduction="mean"):
    valid, safe = _targets(t, lp.shape[1], ignore_index, check=False)
    out = xp.zeros(lp.shape, lp.dtype)
    at = _at_targets(xp, lp, safe)
    r = -_row_scale_np(g, lp.dtype, valid.reshape(-1), reduction)
    if lp.ndim == 2:
        out[at] = r
    else:
        out.reshape(-1)[at.reshape(-1)] = r
    return out


def _nll_backward_vjp(v, out, g, lp, t, *, ignore_index=-100, reduction="mean"):
    # linear in g, constant in lp's values: d/dg <v, dlp> = <v, dlp(g=1)> per row (none) or in all
    from .creation import ones_like
    from .reductions import sum as _sum
    unit = nll_indices_backward(ones_like(g), lp, t, ignore_index, reduction)
    return (_sum(v * unit, 1) if reduction == "none" else _sum(v * unit)), None, None


NLL_INDICES_BACKWARD = defprim("nll_indices_backward", _nll_backward_impl, _ce_backward_rule,
                               _nll_backward_vjp, kind="other", save=lambda rq: (2,),
                               nondiff=(1, 2), grad_name="NllLossBackwardBackward0",
                               extra={"meta": (1,), "batch": _batch_rows(lambda: NLL_INDICES_BACKWARD)})


def nll_indices(lp, target, ignore_index: int = -100, reduction: str = "mean"):
    """The mean / sum / per-row ``-lp[i, target[i]]`` of (N, C) log-probabilities `lp`, rows
    whose target is `ignore_index` left out."""
    return bind(NLL_INDICES, lp, target, ignore_index=int(ignore_index), reduction=reduction)


def nll_indices_backward(g, lp, target, ignore_index: int = -100, reduction: str = "mean"):
    """The gradient of ``nll_indices`` with respect to `lp` (whose values it does not read)."""
    return bind(NLL_INDICES_BACKWARD, g, lp, target, ignore_index=int(ignore_index),
                reduction=reduction)
