"""``torch.distributions.transforms``: invertible maps with the log-determinant of their
Jacobian, for ``TransformedDistribution`` (``transformed.py``): exp, affine, sigmoid, tanh
(the squashed Gaussian of SAC-style policies), power, softmax-free composition.

``cache_size=1`` keeps the last (x, y) pair, so ``inv(t(x))`` returns that very `x` (and
``log_prob`` of a sample is computed from the value it was made from), as PyTorch's."""
from __future__ import annotations

import copy
import math
import weakref

from .. import ops as _ops
from . import constraints

__all__ = ["Transform", "ComposeTransform", "ExpTransform", "AffineTransform", "SigmoidTransform",
           "TanhTransform", "PowerTransform", "StickBreakingTransform", "identity_transform"]


def _softplus(x):
    from ..nn.functional import softplus
    return softplus(x)


def _sum_rightmost(x, n: int):
    """`x` summed over its `n` rightmost dims."""
    for _ in range(n):
        x = x.sum(-1)
    return x


class Transform:
    """Base: subclasses define ``_call``, ``_inverse`` and ``log_abs_det_jacobian``."""
    bijective = True
    domain = constraints.real
    codomain = constraints.real
    sign = 1

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, got {cache_size!r}")
        self._cache_size = cache_size
        self._cached = None

    @property
    def event_dim(self) -> int:
        return self.domain.event_dim

    @property
    def inv(self) -> "Transform":
        # (one inverse per transform, as PyTorch's, held weakly: it holds the transform)
        ref = self.__dict__.get("_inv_ref")
        inv = ref() if ref is not None else None
        if inv is None:
            inv = _Inverse(self)
            self._inv_ref = weakref.ref(inv)
        return inv

    def with_cache(self, cache_size: int = 1) -> "Transform":
        """This transform keeping `cache_size` (0 or 1) pairs: itself if it already does,
        else a copy with an empty cache."""
        if self._cache_size == cache_size:
            return self
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, got {cache_size!r}")
        new = copy.copy(self)
        new._cache_size, new._cached = cache_size, None
        new.__dict__.pop("_inv_ref", None)   # (the copy gets an inverse of its own)
        return new

    def __call__(self, x):
        return self._cached_map(x, 0, self._call)

    def _inv_call(self, y):
        return self._cached_map(y, 1, self._inverse)

    def _cached_map(self, v, side: int, fn):
        """fn(v), or the cached pair's other side when `v` is its `side` (0: x, 1: y)."""
        if self._cache_size and self._cached is not None and self._cached[side] is v:
            return self._cached[1 - side]
        out = fn(v)
        if self._cache_size:
            self._cached = (v, out) if side == 0 else (out, v)
        return out

    def _call(self, x):
        raise NotImplementedError(f"{type(self).__name__} does not define its forward map")

    def _inverse(self, y):
        raise NotImplementedError(f"{type(self).__name__} is not invertible")

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError(f"{type(self).__name__}.log_abs_det_jacobian is not implemented")

    def forward_shape(self, shape):
        """The shape of y for an x of `shape` (the same unless the map changes it)."""
        return tuple(shape)

    def inverse_shape(self, shape):
        return tuple(shape)

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


class _Inverse(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__(transform._cache_size)
        self._inv = transform
        self.domain, self.codomain = transform.codomain, transform.domain

    @property
    def inv(self) -> Transform:
        return self._inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        # (the pairs live in the transform inverted: its cache is this one's)
        return self if self._inv._cache_size == cache_size else self._inv.with_cache(cache_size).inv

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape):
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        return self._inv.forward_shape(shape)


class ComposeTransform(Transform):
    """The transforms applied left to right."""

    def __init__(self, parts: list, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.parts = list(parts)

    @property
    def event_dim(self) -> int:
        return max((p.event_dim for p in self.parts), default=0)

    def _call(self, x):
        for p in self.parts:
            x = p(x)
        return x

    def _inverse(self, y):
        for p in reversed(self.parts):
            y = p.inv(y)
        return y

    def log_abs_det_jacobian(self, x, y):
        total = 0
        for p in self.parts:
            y_p = p(x)
            total = total + p.log_abs_det_jacobian(x, y_p)
            x = y_p
        return total

    def forward_shape(self, shape):
        for p in self.parts:
            shape = p.forward_shape(shape)
        return tuple(shape)

    def inverse_shape(self, shape):
        for p in reversed(self.parts):
            shape = p.inverse_shape(shape)
        return tuple(shape)


class ExpTransform(Transform):
    codomain = constraints.positive

    def _call(self, x):
        return _ops.exp(x)

    def _inverse(self, y):
        return _ops.log(y)

    def log_abs_det_jacobian(self, x, y):
        return x


class AffineTransform(Transform):
    """``y = loc + scale * x`` (elementwise; `event_dim` dims summed in the log-determinant)."""

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    @property
    def event_dim(self) -> int:
        return self._event_dim

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        scale = self.scale
        if isinstance(scale, (int, float)):
            out = _ops.full_like(x, math.log(abs(scale)))
        else:
            out = _ops.log(_ops.abs(scale)).expand_as(x) if tuple(scale.shape) != tuple(x.shape) \
                else _ops.log(_ops.abs(scale))
        return _sum_rightmost(out, self._event_dim)


class SigmoidTransform(Transform):
    codomain = constraints.unit_interval

    def _call(self, x):
        return _ops.sigmoid(x)

    def _inverse(self, y):
        import numpy as np
        tiny = float(np.finfo(y.dtype.np).tiny)
        eps = float(np.finfo(y.dtype.np).eps)
        y = y.clamp(min=tiny, max=1 - eps)
        return _ops.log(y) - _ops.log1p(-y)

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class TanhTransform(Transform):
    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x):
        return _ops.tanh(x)

    def _inverse(self, y):
        return 0.5 * (_ops.log1p(y) - _ops.log1p(-y))

    def log_abs_det_jacobian(self, x, y):
        # log(1 - tanh(x)^2), written to stay finite for large |x|
        return 2.0 * (math.log(2.0) - x - _softplus(-2.0 * x))


class PowerTransform(Transform):
    codomain = constraints.positive
    domain = constraints.positive

    def __init__(self, exponent, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.exponent = exponent

    def _call(self, x):
        return x ** self.exponent

    def _inverse(self, y):
        return y ** (1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        e = self.exponent
        return _ops.log(_ops.abs(e * y / x)) if not isinstance(e, (int, float)) \
            else _ops.log(_ops.abs(y / x)) + math.log(abs(e))


class StickBreakingTransform(Transform):
    """R^(K-1) onto the K-simplex by stick breaking: z_i = sigmoid(x_i - log(K - i)) of what
    is left, the offsets making x = 0 the uniform point."""
    domain = constraints.real_vector
    codomain = constraints.simplex

    @staticmethod
    def _offset_log(n: int, dtype):
        return _ops.log(_ops.arange(n, 0, -1, dtype=dtype))

    def _call(self, x):
        import numpy as np
        finfo = np.finfo(x.dtype.np)
        z = _ops.sigmoid(x - self._offset_log(x.shape[-1], x.dtype))
        z = z.clamp(float(finfo.tiny), 1 - float(finfo.eps))
        z_cumprod = _ops.cumprod(1 - z, -1)
        ones = _ops.ones_like(z[..., :1])
        return _ops.cat([z, ones], -1) * _ops.cat([ones, z_cumprod], -1)

    def _inverse(self, y):
        import numpy as np
        y_crop = y[..., :-1]
        sf = (1 - _ops.cumsum(y_crop, -1)).clamp(min=float(np.finfo(y.dtype.np).tiny))
        return _ops.log(y_crop) - _ops.log(sf) + self._offset_log(y_crop.shape[-1], y.dtype)

    def log_abs_det_jacobian(self, x, y):
        from ..nn.functional import logsigmoid
        x = x - self._offset_log(x.shape[-1], x.dtype)
        return (-x + logsigmoid(x) + _ops.log(y[..., :-1])).sum(-1)

    def forward_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class _Identity(Transform):
    def _call(self, x):
        return x

    def _inverse(self, y):
        return y

    def log_abs_det_jacobian(self, x, y):
        return _ops.zeros_like(x)


identity_transform = _Identity()

from .transforms_more import *  # noqa: E402,F401,F403  (the rest of torch's transforms)
from . import transforms_more as _more  # noqa: E402
__all__ += [n for n in _more.__all__ if n not in ("ConstraintRegistry", "biject_to", "transform_to")]
from .transforms_cat import CatTransform, StackTransform  # noqa: E402
__all__ += ["CatTransform", "StackTransform"]
