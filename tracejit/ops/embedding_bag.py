"""``embedding_bag``: sums, means or maxima of bags of embedding rows, without the
per-row intermediate a Python loop over bags would make.

The bags are given as a 2-D index tensor (one bag per row) or as a 1-D index tensor cut
by ``offsets``. Rows are gathered once (embedding), weighted by ``per_sample_weights``
for sums, then reduced per bag: sum and mean as one scatter-add into the bags (mean
divides by each bag's size; an empty bag gives zeros, as in PyTorch), max over a padded
(bags, longest bag) table. ``padding_idx`` rows count for nothing.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..tensor import Tensor
from .composite import embedding
from .creation import tensor, zeros
from .elementwise import where
from .indexing import getitem, scatter_add
from .reductions import amax
from .shape import expand, reshape, unsqueeze
from .registry import refuse_tracing

__all__ = ["embedding_bag"]


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type: float = 2, scale_grad_by_freq=False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights=None,
                  include_last_offset: bool = False, padding_idx=None):
    refuse_tracing("embedding_bag", "its indices and offsets")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if max_norm is not None:
        raise NotImplementedError("embedding_bag: max_norm is not supported")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError("embedding_bag: per_sample_weights is only supported with mode='sum'")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None for a 2-D input")
        nbags, width = input.shape
        bag_of = np.repeat(np.arange(nbags), width)
        flat = reshape(input, (-1,))
        if per_sample_weights is not None:
            per_sample_weights = reshape(per_sample_weights, (-1,))
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("embedding_bag: offsets are needed for a 1-D input")
        offs = (offsets.numpy() if isinstance(offsets, Tensor) else np.asarray(offsets)).astype(np.int64)
        n = input.shape[0]
        if include_last_offset:
            bounds = offs
        else:
            bounds = np.concatenate([offs, [n]])
        nbags = len(bounds) - 1
        bag_of = np.repeat(np.arange(nbags), np.diff(bounds))
        flat = input
    else:
        raise ShapeError(f"embedding_bag: input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    ids = flat.numpy().astype(np.int64)
    keep = np.ones(ids.shape, dtype=bool) if padding_idx is None else ids != (
        padding_idx if padding_idx >= 0 else padding_idx + weight.shape[0])
    rows = embedding(flat, weight)                                   # (L, D)
    d = weight.shape[1]
    if per_sample_weights is not None:
        rows = rows * unsqueeze(per_sample_weights, 1)
    if not keep.all():
        rows = rows * tensor(keep[:, None].astype(weight.dtype.np), device=weight.device)
    if mode == "max":
        counts = np.bincount(bag_of[keep], minlength=nbags)
        width = max(int(counts.max()) if counts.size else 0, 1)
        order = np.flatnonzero(keep)
        bag = bag_of[order]
        slot = np.arange(order.size) - (np.cumsum(counts) - counts)[bag]
        table_idx = np.full((nbags, width), -1, dtype=np.int64)
        table_idx[bag, slot] = order
        present = table_idx >= 0
        gathered = getitem(rows, tensor(np.where(present, table_idx, 0).reshape(-1), device=weight.device))
        gathered = reshape(gathered, (nbags, width, d))
        gathered = where(tensor(present[:, :, None], device=weight.device), gathered, float("-inf"))
        out = amax(gathered, 1)
        return where(tensor((counts > 0)[:, None], device=weight.device), out, 0.0)
    idx = expand(unsqueeze(tensor(bag_of, device=weight.device), 1), (bag_of.size, d))
    out = scatter_add(zeros((nbags, d), dtype=weight.dtype, device=weight.device), 0, idx, rows)
    if mode == "mean":
        counts = np.bincount(bag_of[keep], minlength=nbags).astype(weight.dtype.np)
        out = out / tensor(np.maximum(counts, 1)[:, None], device=weight.device)
    return out
