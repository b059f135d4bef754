"""Products and distances with PyTorch's signatures, as composites of matmul and
elementwise ops: bilinear, addmm / addmv / addbmm / baddbmm / addr, inner, cross, cdist,
pdist, chain_matmul."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ShapeError
from ..shapes import normalize_dim
from .creation import tensor
from .indexing import getitem
from .linalg import matmul
from .reductions import _root, norm, sum as _sum
from .shape import reshape, stack, transpose, unsqueeze
from . import autocast as _autocast
from .dtype_checks import takes

__all__ = ["bilinear", "addmm", "addmv", "addbmm", "baddbmm", "addr", "inner", "cross",
           "cdist", "pdist", "chain_matmul"]


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = x1 @ weight[o] @ x2 (+ bias[o]); weight (out, in1, in2)."""
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise ShapeError(f"bilinear: inputs {tuple(input1.shape)}, {tuple(input2.shape)} do not match "
                         f"weight {tuple(weight.shape)} (out, in1, in2)")
    o, i, j = weight.shape
    lead = tuple(input1.shape[:-1])
    x1 = reshape(input1, (-1, i))
    x2 = reshape(input2, (-1, j))
    t = reshape(matmul(x1, reshape(transpose(weight, 0, 1), (i, o * j))), (-1, o, j))   # (B, O, J)
    out = _sum(t * unsqueeze(x2, 1), -1)
    if bias is not None:
        out = out + bias
    return reshape(out, lead + (o,))


@_autocast.lower
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    prod = matmul(mat1, mat2)
    return (input * beta if beta != 1 else input) + (prod * alpha if alpha != 1 else prod)


@_autocast.unlisted
def addmv(input, mat, vec, *, beta=1, alpha=1):
    return addmm(input, mat, vec, beta=beta, alpha=alpha)


@_autocast.lower
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return addmm(input, reshape(transpose(batch1, 0, 1), (batch1.shape[1], -1)),
                 reshape(batch2, (-1, batch2.shape[2])), beta=beta, alpha=alpha)


@_autocast.lower
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return addmm(input, batch1, batch2, beta=beta, alpha=alpha)


@_autocast.unlisted
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    return addmm(input, unsqueeze(vec1, 1), unsqueeze(vec2, 0), beta=beta, alpha=alpha)


def inner(input, other):
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    return matmul(input, transpose(other, -1, -2)) if other.ndim >= 2 else matmul(input, other)


def cross(input, other, dim=None):
    """Cross product of 3-vectors along `dim` (the first dim of size 3 when None)."""
    if dim is None:
        dim = next((d for d in range(input.ndim) if input.shape[d] == 3), None)
        if dim is None:
            raise ShapeError(f"cross: no dimension of size 3 in input of shape {tuple(input.shape)}")
    d = normalize_dim(dim, input.ndim, "cross")
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise ShapeError(f"cross: dimension {dim} must have size 3, got {tuple(input.shape)} and "
                         f"{tuple(other.shape)}")

    def c(t, k):
        return getitem(t, (slice(None),) * d + (k,))
    a0, a1, a2 = c(input, 0), c(input, 1), c(input, 2)
    b0, b1, b2 = c(other, 0), c(other, 1), c(other, 2)
    return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


def linalg_cross(input, other, *, dim: int = -1):
    return cross(input, other, dim)


@takes("x1", "x2")
@_autocast.fp32
def cdist(x1, x2, p: float = 2.0, compute_mode=None):
    """Pairwise p-norm distances between the rows of x1 (.., P, M) and x2 (.., R, M); p = 2
    through a product where `compute_mode` says so (by default: more than 25 rows), as PyTorch's."""
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(f"cdist: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} must have the same "
                         f"number of columns")
    _nonnegative_p("cdist", p)
    if compute_mode not in _CDIST_MODES:
        raise ArgumentError(f"cdist: compute_mode must be one of {_CDIST_MODES}, got {compute_mode!r}")
    rows = (x1.shape[-2], x2.shape[-2])
    small = all(type(r) is int and r <= 25 for r in rows)   # (a symbolic count: the product)
    mm = compute_mode == "use_mm_for_euclid_dist" or (compute_mode != "donot_use_mm_for_euclid_dist" and not small)
    if p == 2 and mm:   # (|x|^2 - 2 x.y + |y|^2: a zero distance comes out as ~1e-3 in float32)
        sq1 = _sum(x1 * x1, -1, keepdim=True)
        sq2 = _sum(x2 * x2, -1, keepdim=True)
        d2 = sq1 - 2 * matmul(x1, transpose(x2, -1, -2)) + transpose(sq2, -1, -2)
        from .elementwise import clamp
        return _root(clamp(d2, min=0.0), 2)   # (its gradient is 0 at a zero distance)
    return _distance(unsqueeze(x1, -2) - unsqueeze(x2, -3), p)


def _distance(diff, p):
    """The p-norm of the last dim. For p = 0, as PyTorch's cdist and pdist: a NaN difference
    gives NaN (`vector_norm(x, 0)` counts it) and the inputs' gradient is 0 (not None)."""
    if p == 0:
        from .elementwise import where
        return _sum(where(abs(diff) > 0, 1.0, diff * 0), -1)
    return norm(diff, p, -1)


_CDIST_MODES = (None, "use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def _nonnegative_p(op: str, p) -> None:
    if p < 0:
        raise ArgumentError(f"{op}: p must be non-negative, got {p}")


@takes("input")
def pdist(input, p: float = 2.0):
    """Distances between every pair of rows i < j of a 2-D input, as a vector."""
    if input.ndim != 2:
        raise ShapeError(f"pdist: expected a 2-D input, got shape {tuple(input.shape)}")
    _nonnegative_p("pdist", p)
    n = input.shape[0]
    a, b = (getitem(input, tensor(ix, device=input.device)) for ix in np.triu_indices(n, 1))
    return _distance(a - b, p)


def chain_matmul(*matrices):
    out = matrices[0]
    for m in matrices[1:]:
        out = matmul(out, m)
    return out
