"""``embedding_bag``: sums, means or maxima of bags of embedding rows, one primitive each way.

The bags are given as a 2-D index tensor (one bag per row) or as a 1-D index tensor cut
by ``offsets``. The forward gathers the rows and reduces each bag's run of them in one
call; the backward is one record too, with ``wrt`` naming what it gives: the weight's
gradient, the per-sample weights' gradient, or (mode max) the gradient's values at each
bag's arg-max, the adjoint of the weight's. The family is closed under differentiation,
so higher orders are records of the same two primitives.

Sums add a bag's rows in order; means divide the sum by the bag's size (an empty bag
gives zeros, as in PyTorch); maxima take the first row of the maximum (PyTorch's arg-max).
``padding_idx`` rows count for nothing.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import dtypes as _dt
from ..errors import ArgumentError, DTypeError, ShapeError, user_stacklevel
from ..tensor import Tensor
from .composite import renorm_rows
from .creation import arange, tensor
from .gather_prim import _in_range_impl
from .registry import Aval, bind, defprim
from .shape import reshape

__all__ = ["embedding_bag", "EMBEDDING_BAG", "EMBEDDING_BAG_BACKWARD"]


def bag_runs(indices, offsets, include_last_offset: bool, mode: str, padding_idx=None):
    """(each bag's start, each bag's length, the indices read) of a 1-D index array cut
    at `offsets`; the last bag runs to the end of the indices. With ``include_last_offset``
    PyTorch's sums without padding_idx end it at the last offset instead (the indices after
    it are not read), its other modes read to the end: as here. Raises naming a bad offset."""
    n = indices.shape[0]
    m = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    if include_last_offset and m >= 0 and int(offsets[m]) > n:
        raise ArgumentError(f"embedding_bag: offsets[-1] must be at most the number of indices ({n}), "
                            f"got {int(offsets[m])}")
    starts = offsets[:m].astype(np.int64, copy=False)
    if m == 0:   # (no bags: the indices are not read, as in PyTorch)
        return starts, starts, indices[:0]
    if starts[0] != 0:
        raise ValueError(f"embedding_bag: offsets[0] must be 0 (the first bag starts at the first "
                         f"index), got {int(starts[0])}")
    end = int(offsets[m]) if include_last_offset and mode == "sum" and padding_idx is None else n
    lengths = np.diff(starts, append=end)
    if lengths.min() < 0:
        raise ValueError(f"embedding_bag: offsets must be non-decreasing and at most the number of "
                         f"indices ({n}), got {offsets.tolist()}")
    return starts, lengths, indices[:end]


def _rows(weight, idx, psw, padding_idx, fill):
    """weight's rows at idx (range-checked), times the per-sample weights, `fill` at padding
    rows; and the padding mask (None without padding_idx)."""
    _in_range_impl(np, idx, size=weight.shape[0], op="embedding_bag")
    rows = weight.take(idx, axis=0)
    if psw:
        rows *= psw[0][:idx.shape[0], None]
    keep = None
    if padding_idx is not None:
        keep = idx != padding_idx
        rows[~keep] = fill
    return rows, keep


def _reduce(ufunc, rows, starts, lengths, m: int):
    """ufunc's reduction of each bag's run of rows, (m, D); empty bags are left 0."""
    out = np.zeros((m, rows.shape[1]), rows.dtype)
    full = lengths > 0
    if full.any():
        out[full] = ufunc.reduceat(rows, starts[full], axis=0)
    return out


def _sizes(lengths, keep, starts):
    """Each bag's number of rows that count (padding rows do not)."""
    if keep is None:
        return lengths
    return _reduce(np.add, keep[:, None].astype(np.int64), starts, lengths, lengths.shape[0])[:, 0]


def _embedding_bag_rule(weight, indices, offsets, *psw, mode, padding_idx, include_last_offset):
    if weight.ndim != 2:
        raise ShapeError(f"embedding_bag: weight must be 2-D (num_embeddings, dim), got {tuple(weight.shape)}")
    for name, a, ok, want in (("weight", weight, weight.dtype.is_floating_point, "a floating"),
                              ("offsets", offsets, offsets.dtype.is_integer, "an integer")):
        if not ok:
            raise DTypeError(f"embedding_bag: {name} must be {want} tensor, got {a.dtype.name}")
    if psw and (tuple(psw[0].shape) != tuple(indices.shape) or psw[0].dtype is not weight.dtype):
        raise ShapeError(f"embedding_bag: per_sample_weights {psw[0].dtype.name}{tuple(psw[0].shape)} must "
                         f"match the indices' shape {tuple(indices.shape)} and the weight's dtype")
    return Aval((offsets.shape[0] - bool(include_last_offset), weight.shape[1]), weight.dtype, weight.device)


def add_rows_np(out, idx, rows):
    """``out[idx[i]] += rows[i]`` in order of i (np.add.at over the flat positions); a
    backend passes its own loop to `bag_forward` and `bag_backward`."""
    d = out.shape[1]
    np.add.at(out.reshape(-1), (idx[:, None] * d + np.arange(d)).reshape(-1), rows.reshape(-1))
    return out


def bag_forward(weight, indices, offsets, *psw, mode, padding_idx, include_last_offset, add=None):
    """The forward's values; sums by `add` (`add_rows_np`'s contract) where given, else
    by numpy's reduceat (the faster numpy call)."""
    starts, lengths, idx = bag_runs(indices, offsets, include_last_offset, mode, padding_idx)
    m = starts.shape[0]
    rows, keep = _rows(weight, idx, psw, padding_idx, -np.inf if mode == "max" else 0)
    if add is None or mode == "max":
        out = _reduce(np.maximum if mode == "max" else np.add, rows, starts, lengths, m)
    else:
        out = add(np.zeros((m, rows.shape[1]), rows.dtype), np.repeat(np.arange(m), lengths), rows)
    if mode == "sum":
        return out
    sizes = _sizes(lengths, keep, starts)
    if mode == "mean":
        return out / np.maximum(sizes, 1).astype(out.dtype)[:, None]
    out[sizes == 0] = 0   # (bags of padding rows only)
    return out


def _embedding_bag_vjp(g, out, weight, indices, offsets, *psw, needs=None, **p):
    gw = bind(EMBEDDING_BAG_BACKWARD, g, weight, indices, offsets, *psw, wrt="weight", **p)
    if not psw:
        return gw, None, None
    gp = bind(EMBEDDING_BAG_BACKWARD, g, weight, indices, offsets, wrt="per_sample_weights", **p) \
        if needs is None or needs[3] else None
    return gw if needs is None or needs[0] else None, None, None, gp


EMBEDDING_BAG = defprim("embedding_bag", lambda xp, *a, **p: bag_forward(*a, **p), _embedding_bag_rule,
                        _embedding_bag_vjp, kind="other", host=True, nondiff=(1, 2), grad_name="EmbeddingBagBackward0",
                        save=lambda rq: tuple(range(len(rq))), extra={"needs": True})


def _backward_rule(g, weight, indices, offsets, *psw, wrt, **p):
    if wrt == "weight":
        return Aval(weight.shape, weight.dtype, weight.device)
    if wrt == "per_sample_weights":
        return Aval(indices.shape, weight.dtype, weight.device)
    return Aval((offsets.shape[0] - bool(p["include_last_offset"]), weight.shape[1]), weight.dtype, weight.device)


def _first_max(weight, idx, starts, lengths, padding_idx):
    """Per bag and column, the position in idx of the bag's first maximum row ((m, D); -1
    for bags without a row that counts), as PyTorch's arg-max."""
    m = starts.shape[0]
    rows, keep = _rows(weight, idx, (), padding_idx, -np.inf)
    top = _reduce(np.maximum, rows, starts, lengths, m)
    n = rows.shape[0]
    bag = np.repeat(np.arange(m), lengths)
    at = np.where(rows == top[bag], np.arange(n)[:, None], n)
    pos = _reduce(np.minimum, at, starts, lengths, m)
    bad = (pos >= n) | (lengths == 0)[:, None]
    if keep is not None:
        bad |= (_sizes(lengths, keep, starts) == 0)[:, None]
    pos[bad] = -1
    return pos


def _weight_rows(g, weight, indices, offsets, *psw, mode, padding_idx, include_last_offset, wrt="weight"):
    """(indices read, the rows of gradient they add) of a sum or mean's weight gradient, or
    the per-sample weights' gradient (wrt="per_sample_weights")."""
    starts, lengths, idx = bag_runs(indices, offsets, include_last_offset, mode, padding_idx)
    _in_range_impl(np, idx, size=weight.shape[0], op="embedding_bag")
    if mode == "mean":
        keep = None if padding_idx is None else idx != padding_idx
        g = g / np.maximum(_sizes(lengths, keep, starts), 1).astype(g.dtype)[:, None]
    bag = np.repeat(np.arange(starts.shape[0]), lengths)
    if wrt == "per_sample_weights":   # (zeros for the indices after the last bag)
        rows = np.zeros(indices.shape[0], g.dtype)
        rows[:idx.shape[0]] = np.einsum("ij,ij->i", g.take(bag, axis=0), weight.take(idx, axis=0))
    else:
        rows = g.take(bag, axis=0)
        if psw:
            rows *= psw[0][:idx.shape[0], None]
    if padding_idx is not None:
        rows[:idx.shape[0]][idx == padding_idx] = 0
    return idx, rows


def bag_backward(g, weight, indices, offsets, *psw, wrt, add=add_rows_np, **p):
    """The backward's values (see the top); a sum or mean's weight gradient added by `add`."""
    v, d = weight.shape
    if p["mode"] != "max":
        idx, rows = _weight_rows(g, weight, indices, offsets, *psw, wrt=wrt, **p)
        return rows if wrt == "per_sample_weights" else add(np.zeros((v, d), g.dtype), idx, rows)
    starts, lengths, idx = bag_runs(indices, offsets, p["include_last_offset"], "max")
    pos = _first_max(weight, idx, starts, lengths, p["padding_idx"])
    ok = pos >= 0
    flat = idx[pos[ok]] * d + np.nonzero(ok)[1]
    if wrt == "select":   # (g is weight-shaped)
        out = np.zeros((starts.shape[0], d), g.dtype)
        out[ok] = g.reshape(-1)[flat]
        return out
    gw = np.zeros(v * d, g.dtype)
    np.add.at(gw, flat, g[ok])
    return gw.reshape(v, d)


def _backward_vjp(gg, out, g, weight, indices, offsets, *psw, wrt, **p):
    ops = (indices, offsets)
    if wrt == "per_sample_weights":   # <g[bag_i], weight[idx_i]>: bilinear in g and weight
        return (bind(EMBEDDING_BAG, weight, *ops, gg, **p),
                bind(EMBEDDING_BAG_BACKWARD, g, weight, *ops, gg, wrt="weight", **p), None, None)
    if wrt == "select":   # linear in g, its adjoint the weight's gradient
        return bind(EMBEDDING_BAG_BACKWARD, gg, weight, *ops, wrt="weight", **p), None, None, None
    dg = (bind(EMBEDDING_BAG_BACKWARD, gg, weight, *ops, wrt="select", **p) if p["mode"] == "max"
          else bind(EMBEDDING_BAG, gg, *ops, *psw, **p))
    if not psw:
        return dg, None, None, None
    return dg, None, None, None, bind(EMBEDDING_BAG_BACKWARD, g, gg, *ops, wrt="per_sample_weights", **p)


EMBEDDING_BAG_BACKWARD = defprim("embedding_bag_backward", lambda xp, *a, **p: bag_backward(*a, **p),
                                 _backward_rule, _backward_vjp, kind="other", host=True, nondiff=(2, 3), save=lambda rq: tuple(range(len(rq))))


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2, scale_grad_by_freq=False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx=None):
    """PyTorch's ``F.embedding_bag``: each bag's rows of `weight` reduced by `mode`.
    ``sparse`` is accepted; gradients here are dense."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if isinstance(weight, Tensor) and weight.dtype is _dt.int64 and isinstance(input, Tensor) \
            and input.dtype.is_floating_point:   # (the order before PyTorch 0.4: swapped, as PyTorch does)
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage `embedding_bag(weight, "
                      "input, ...)` is deprecated, and should now be `embedding_bag(input, weight, ...)`.",
                      UserWarning, stacklevel=user_stacklevel())
        input, weight = weight, input
    if isinstance(input, Tensor) and (input.dtype.is_floating_point or input.dtype.is_complex):
        raise DTypeError(f"embedding_bag: input must be an integer tensor of indices, got {input.dtype.name}")
    if scale_grad_by_freq and mode == "max":
        raise ValueError("embedding_bag: max mode does not support scaling the gradient by the frequency")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights is only supported with mode='sum'")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None for a 2-D input")
        offsets = arange(input.shape[0], device=input.device) * input.shape[1]
        input = reshape(input, (-1,))
        include_last_offset = False
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: offsets are needed for a 1-D input")
        if not isinstance(offsets, Tensor):
            offsets = tensor(offsets, device=input.device)
        if offsets.ndim != 1:
            raise ShapeError(f"embedding_bag: offsets must be 1-D, got shape {tuple(offsets.shape)}")
        if include_last_offset and offsets.shape[0] == 0:
            raise ValueError("embedding_bag: include_last_offset=True needs at least one offset (the end)")
    else:
        raise ShapeError(f"embedding_bag: input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    if max_norm is not None:
        renorm_rows(input, weight, max_norm, norm_type)
    if scale_grad_by_freq:   # each row's gradient divided by how often the batch uses it
        from .reductions_more import bincount
        counts = bincount(input, minlength=weight.shape[0]).clamp(min=1)
        s = reshape(1.0 / counts.to(weight.dtype), (-1, 1))
        weight = weight.detach() + (weight - weight.detach()) * s
    psw = () if per_sample_weights is None else (reshape(per_sample_weights, (-1,)),)
    if padding_idx is not None:
        padding_idx = padding_idx + weight.shape[0] if padding_idx < 0 else padding_idx
    return bind(EMBEDDING_BAG, weight, input, offsets, *psw, mode=mode, padding_idx=padding_idx,
                include_last_offset=bool(include_last_offset))
