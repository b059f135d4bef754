"""Embedding's ``max_norm``: the rows looked up scaled down to the norm, in place and
untracked, as PyTorch's embedding_renorm_ (shared by embedding and embedding_bag)."""
from __future__ import annotations

from .elementwise import where
from .indexing import getitem, in_range
from .shape import reshape

__all__ = ["renorm_rows"]


def renorm_rows(input, weight, max_norm: float, norm_type: float) -> None:
    """Scale the rows of `weight` at `input` whose norm exceeds max_norm down to it, in
    place and untracked (PyTorch's embedding_renorm_)."""
    from ..autograd.grad_mode import no_grad
    from .reductions_more import unique
    with no_grad():
        rows = unique(reshape(in_range(input, weight.shape[0], "embedding"), (-1,)))
        picked = getitem(weight, rows)
        norms = picked.norm(norm_type, 1, keepdim=True)
        scale = where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[rows] = picked * scale
