"""``CatTransform`` and ``StackTransform`` of ``torch.distributions.transforms``: a transform
per piece of a tensor, the pieces consecutive runs (``cat``) or slices (``stack``) along one
dim, as joint models with differently constrained parameters in one vector use them
(``biject_to(constraints.cat([...]))``)."""
from __future__ import annotations

from typing import Optional, Sequence

from .. import ops as _ops
from . import constraints as C
from .transforms import Transform, _sum_rightmost
from .transforms_more import biject_to, transform_to

__all__ = ["CatTransform", "StackTransform"]


def _parts(name: str, tseq) -> list:
    tseq = list(tseq)
    for i, t in enumerate(tseq):
        if not isinstance(t, Transform):
            raise TypeError(f"{name}: tseq[{i}] must be a Transform, got {type(t).__name__}")
    return tseq


def _check_dim(name: str, what: str, v, dim: int, size: int) -> None:
    """`dim` must index `v`, and `v` be `size` long along it."""
    if not -v.dim() <= dim < v.dim():
        raise ValueError(f"{name}: dim {dim} is out of range for {what} with {v.dim()} dimensions")
    if v.size(dim) != size:
        raise ValueError(f"{name}: {what}.size({dim}) = {v.size(dim)} must equal {size}, the transforms' "
                         "total length")


class CatTransform(Transform):
    """``tseq[i]`` applied to the i-th run of ``lengths[i]`` entries (1 each by default)
    along `dim`, the results concatenated there."""

    def __init__(self, tseq: Sequence[Transform], dim: int = 0, lengths: Optional[Sequence[int]] = None,
                 cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.transforms = _parts("CatTransform", tseq)
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"CatTransform: {len(self.transforms)} transforms but {len(self.lengths)} lengths")
        self.dim = dim

    @property
    def event_dim(self) -> int:
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self) -> int:
        return sum(self.lengths)

    @property
    def bijective(self) -> bool:
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        return C.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self):
        return C.cat([t.codomain for t in self.transforms], self.dim, self.lengths)

    def with_cache(self, cache_size: int = 1) -> "CatTransform":
        return self if self._cache_size == cache_size else \
            CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, *vs):
        """For each transform: it and its run of each of `vs`."""
        start = 0
        for t, n in zip(self.transforms, self.lengths):
            yield (t,) + tuple(v.narrow(self.dim, start, n) for v in vs)
            start += n

    def _call(self, x):
        _check_dim("CatTransform", "x", x, self.dim, self.length)
        return _ops.cat([t(xs) for t, xs in self._pieces(x)], self.dim)

    def _inverse(self, y):
        _check_dim("CatTransform", "y", y, self.dim, self.length)
        return _ops.cat([t.inv(ys) for t, ys in self._pieces(y)], self.dim)

    def log_abs_det_jacobian(self, x, y):
        _check_dim("CatTransform", "x", x, self.dim, self.length)
        _check_dim("CatTransform", "y", y, self.dim, self.length)
        event_dim, terms = self.event_dim, []
        for t, xs, ys in self._pieces(x, y):
            # (a piece with fewer event dims sums its terms down to the widest one's shape)
            terms.append(_sum_rightmost(t.log_abs_det_jacobian(xs, ys), event_dim - t.event_dim))
        # `dim` as counted from the right of the batch shape the terms have
        dim = (self.dim - x.dim() if self.dim >= 0 else self.dim) + event_dim
        if dim < 0:   # a batch dim: the terms line up along it
            return _ops.cat(terms, dim)
        total = terms[0]   # an event dim: summed away, so the pieces' terms add
        for term in terms[1:]:
            total = total + term
        return total

    def __repr__(self) -> str:
        return f"CatTransform({self.transforms}, dim={self.dim}, lengths={self.lengths})"


class StackTransform(Transform):
    """``tseq[i]`` applied to the i-th slice along `dim`, the results stacked there."""

    def __init__(self, tseq: Sequence[Transform], dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.transforms = _parts("StackTransform", tseq)
        self.dim = dim

    @property
    def bijective(self) -> bool:
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self):
        return C.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self):
        return C.stack([t.codomain for t in self.transforms], self.dim)

    def with_cache(self, cache_size: int = 1) -> "StackTransform":
        return self if self._cache_size == cache_size else StackTransform(self.transforms, self.dim, cache_size)

    def _slices(self, v, what: str) -> list:
        _check_dim("StackTransform", what, v, self.dim, len(self.transforms))
        return [v.select(self.dim, i) for i in range(len(self.transforms))]

    def _call(self, x):
        return _ops.stack([t(xs) for t, xs in zip(self.transforms, self._slices(x, "x"))], self.dim)

    def _inverse(self, y):
        return _ops.stack([t.inv(ys) for t, ys in zip(self.transforms, self._slices(y, "y"))], self.dim)

    def log_abs_det_jacobian(self, x, y):
        return _ops.stack([t.log_abs_det_jacobian(xs, ys) for t, xs, ys in
                           zip(self.transforms, self._slices(x, "x"), self._slices(y, "y"))], self.dim)

    def __repr__(self) -> str:
        return f"StackTransform({self.transforms}, dim={self.dim})"


for _reg in (biject_to, transform_to):
    _reg.register(C._Cat, lambda c, r=_reg: CatTransform([r(p) for p in c.cseq], c.dim, c.lengths))
    _reg.register(C._Stack, lambda c, r=_reg: StackTransform([r(p) for p in c.cseq], c.dim))
del _reg
