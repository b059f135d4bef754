"""``embedding_bag``: sums, means or maxima of bags of embedding rows, without the
per-row intermediate a Python loop over bags would make.

The bags are given as a 2-D index tensor (one bag per row) or as a 1-D index tensor cut
by ``offsets``. Each index's bag number is computed with tensor ops (a mark at every
offset, then a running sum), so the whole function traces and compiles like any other
composite. Rows are gathered once (embedding), weighted by ``per_sample_weights`` for
sums, then reduced per bag: sum and mean as one index-add into the bags (mean divides by
each bag's size; an empty bag gives zeros, as in PyTorch), max as a scatter-max.
``padding_idx`` rows count for nothing.
"""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .composite import embedding
from .creation import arange, full, ones_like, tensor, zeros
from .elementwise import cast, maximum, ne, where
from .indexing_more import index_add, scatter_reduce
from .reductions import cumsum
from .shape import expand, reshape, unsqueeze

__all__ = ["embedding_bag"]


def _bags_from_offsets(input, offsets, include_last_offset: bool):
    """(the bag number of each index, the number of bags) for a 1-D input cut at offsets."""
    if not isinstance(offsets, Tensor):
        offsets = tensor(offsets, device=input.device)
    if offsets.ndim != 1:
        raise ShapeError(f"embedding_bag: offsets must be 1-D, got shape {tuple(offsets.shape)}")
    if offsets.dtype.is_floating_point:
        raise DTypeError(f"embedding_bag: offsets must be an integer tensor, got {offsets.dtype.name}")
    first = int(offsets._data[0]) if offsets._data is not None and offsets.shape[0] else 0
    if first != 0:   # (checked when not traced)
        raise ValueError(f"embedding_bag: offsets[0] must be 0 (the first bag starts at the first "
                         f"index), got {first}")
    n = input.shape[0]
    nbags = offsets.shape[0] - (1 if include_last_offset else 0)
    if nbags < 0:
        raise ValueError("embedding_bag: include_last_offset=True needs at least one offset (the end)")
    inner = cast(offsets[1:nbags], input.dtype)
    marks = index_add(zeros(n + 1, dtype=input.dtype, device=input.device), 0, inner, ones_like(inner))
    return cumsum(marks[:n], 0), nbags


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2, scale_grad_by_freq=False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx=None):
    """PyTorch's ``F.embedding_bag``: each bag's rows of `weight` reduced by `mode`."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if isinstance(input, Tensor) and (input.dtype.is_floating_point or input.dtype.is_complex):
        raise DTypeError(f"embedding_bag: input must be an integer tensor of indices, got {input.dtype.name}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights is only supported with mode='sum'")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None for a 2-D input")
        nbags, width = input.shape
        bag = reshape(expand(unsqueeze(arange(nbags, device=input.device), 1), (nbags, width)), (-1,))
        flat = reshape(input, (-1,))
        if per_sample_weights is not None:
            per_sample_weights = reshape(per_sample_weights, (-1,))
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: offsets are needed for a 1-D input")
        bag, nbags = _bags_from_offsets(input, offsets, include_last_offset)
        flat = input
        if nbags == 0:   # (no bags: the indices are not read, as in PyTorch)
            input = bag = flat = input[:0]
    else:
        raise ShapeError(f"embedding_bag: input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    rows = embedding(flat, weight, max_norm=max_norm, norm_type=norm_type,
                     scale_grad_by_freq=scale_grad_by_freq)                       # (L, D)
    d = weight.shape[1]
    if per_sample_weights is not None:
        rows = rows * unsqueeze(per_sample_weights, 1)
    if padding_idx is None:
        keep = None
        count_of = ones_like(bag, dtype=weight.dtype)
    else:
        pad = padding_idx if padding_idx >= 0 else padding_idx + weight.shape[0]
        keep = ne(flat, pad)
        count_of = cast(keep, weight.dtype)
    counts = index_add(zeros(nbags, dtype=weight.dtype, device=weight.device), 0, bag, count_of)
    if mode == "max":
        if keep is not None:
            rows = where(unsqueeze(keep, 1), rows, float("-inf"))
        base = full((nbags, d), float("-inf"), dtype=weight.dtype, device=weight.device)
        out = scatter_reduce(base, 0, expand(unsqueeze(bag, 1), tuple(rows.shape)), rows, "amax")
        return where(unsqueeze(counts > 0, 1), out, 0.0)
    if keep is not None:
        rows = rows * unsqueeze(count_of, 1)
    out = index_add(zeros((nbags, d), dtype=weight.dtype, device=weight.device), 0, bag, rows)
    if mode == "mean":
        out = out / unsqueeze(maximum(counts, 1.0), 1)
    return out
