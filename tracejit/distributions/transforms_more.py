"""More of ``torch.distributions.transforms`` (softmax, softplus, abs, reshape, independent,
lower-Cholesky, a distribution's CDF) and ``constraint_registry``'s ``biject_to`` /
``transform_to``: the transform from unconstrained space onto a constraint's support, as
variational-inference code asks for it (``transform_to(d.support)(x)``)."""
from __future__ import annotations

import math

from .. import ops as _ops
from . import constraints as C
from .transforms import (AffineTransform, ComposeTransform, ExpTransform, SigmoidTransform, StickBreakingTransform,
                         Transform, _softplus, _sum_rightmost, identity_transform)

__all__ = ["SoftmaxTransform", "SoftplusTransform", "AbsTransform", "ReshapeTransform", "IndependentTransform",
           "LowerCholeskyTransform", "PositiveDefiniteTransform", "CorrCholeskyTransform",
           "CumulativeDistributionTransform", "ConstraintRegistry", "biject_to", "transform_to"]


class SoftmaxTransform(Transform):
    """Onto the simplex by softmax over the last dim (not bijective: the inverse is log)."""
    domain, codomain, bijective = C.real_vector, C.simplex, False

    def _call(self, x):
        return _ops.softmax(x, -1)

    def _inverse(self, y):
        return y.log()


class SoftplusTransform(Transform):
    domain, codomain = C.real, C.positive

    def _call(self, x):
        return _softplus(x)

    def _inverse(self, y):
        return (-(-y).expm1()).log() + y

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x)


class AbsTransform(Transform):
    domain, codomain, bijective = C.real, C.positive, False

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class ReshapeTransform(Transform):
    """The rightmost dims reshaped from `in_shape` to `out_shape` (same number of elements)."""

    def __init__(self, in_shape, out_shape, cache_size: int = 0) -> None:
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size)
        self.domain, self.codomain = C.independent(C.real, len(self.in_shape)), \
            C.independent(C.real, len(self.out_shape))

    def _call(self, x):
        return x.reshape(tuple(x.shape[:x.dim() - len(self.in_shape)]) + self.out_shape)

    def _inverse(self, y):
        return y.reshape(tuple(y.shape[:y.dim() - len(self.out_shape)]) + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        return x.new_zeros(tuple(x.shape[:x.dim() - len(self.in_shape)]))

    def forward_shape(self, shape):
        return tuple(shape[:len(shape) - len(self.in_shape)]) + self.out_shape

    def inverse_shape(self, shape):
        return tuple(shape[:len(shape) - len(self.out_shape)]) + self.in_shape


class IndependentTransform(Transform):
    """`base_transform` with its rightmost `reinterpreted_batch_ndims` batch dims made event
    dims: their log-determinants summed."""

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.base_transform, self.reinterpreted_batch_ndims = base_transform, reinterpreted_batch_ndims
        self.domain = C.independent(base_transform.domain, reinterpreted_batch_ndims)
        self.codomain = C.independent(base_transform.codomain, reinterpreted_batch_ndims)
        self.bijective = base_transform.bijective

    def _call(self, x):
        return self.base_transform(x)

    def _inverse(self, y):
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        return _sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)

    def forward_shape(self, shape):
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        return self.base_transform.inverse_shape(shape)


class LowerCholeskyTransform(Transform):
    """A square matrix to a lower Cholesky factor: its strict lower part, its diagonal
    exponentiated (not bijective: the upper part is dropped)."""
    domain, codomain, bijective = C.independent(C.real, 2), C.lower_cholesky, False

    def _call(self, x):
        return x.tril(-1) + x.diagonal(0, -2, -1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(0, -2, -1).log().diag_embed()


class PositiveDefiniteTransform(Transform):
    """A square matrix to ``L L^T``, L its `LowerCholeskyTransform`."""
    domain, codomain = C.independent(C.real, 2), C.positive_definite

    def _call(self, x):
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.transpose(-2, -1)

    def _inverse(self, y):
        from ..linalg import cholesky
        return LowerCholeskyTransform().inv(cholesky(y))


def _tril_mask(n: int, diag: int):
    r = _ops.arange(n)
    return r < r.reshape(-1, 1) + (diag + 1)


def tril_matrix_to_vec(mat, diag: int = 0):
    """The lower-triangular elements (below diagonal `diag`) of each matrix, row by row."""
    return mat[..., _tril_mask(mat.shape[-1], diag)]


def vec_to_tril_matrix(vec, diag: int = 0):
    """`tril_matrix_to_vec`'s inverse: zeros above diagonal `diag`."""
    n = round((-(1 + 2 * diag) + ((1 + 2 * diag) ** 2 + 8 * vec.shape[-1] + 4 * abs(diag) * (diag + 1)) ** 0.5) / 2)
    mask = _tril_mask(n, diag)
    if int(mask.sum()) != vec.shape[-1]:
        raise ValueError(f"The size of last dimension is {vec.shape[-1]} which cannot be expressed as the "
                         f"lower triangular part of a square D x D matrix.")
    mat = vec.new_zeros(tuple(vec.shape[:-1]) + (n, n))
    mat[..., mask] = vec
    return mat


class CorrCholeskyTransform(Transform):
    """A vector of D(D-1)/2 reals to the Cholesky factor of a D x D correlation matrix:
    tanh, then a signed stick breaking of each row to unit length."""
    domain, codomain = C.real_vector, C.corr_cholesky

    def _call(self, x):
        import numpy as np
        eps = float(np.finfo(x.dtype.np).eps)
        r = vec_to_tril_matrix(x.tanh().clamp(-1 + eps, 1 - eps), diag=-1)
        z1m_cumprod_sqrt = (1 - r ** 2).sqrt().cumprod(-1)
        ones = _ops.ones_like(z1m_cumprod_sqrt[..., :1])
        return (r + _ops.eye(r.shape[-1], dtype=r.dtype)) * _ops.cat([ones, z1m_cumprod_sqrt[..., :-1]], -1)

    def _inverse(self, y):
        y_cumsum = 1 - (y * y).cumsum(-1)
        shifted = _ops.cat([_ops.ones_like(y_cumsum[..., :1]), y_cumsum[..., :-1]], -1)
        t = tril_matrix_to_vec(y, diag=-1) / tril_matrix_to_vec(shifted, diag=-1).sqrt()
        return (t.log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y):
        stick = 0.5 * tril_matrix_to_vec(1 - (y * y).cumsum(-1), diag=-2).log().sum(-1)
        return stick - 2 * (x + _softplus(-2 * x) - math.log(2.0)).sum(-1)

    def forward_shape(self, shape):
        d = round((0.25 + 2 * shape[-1]) ** 0.5 + 0.5)
        if d * (d - 1) // 2 != shape[-1]:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (d, d)

    def inverse_shape(self, shape):
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        return tuple(shape[:-2]) + (shape[-1] * (shape[-1] - 1) // 2,)


class CumulativeDistributionTransform(Transform):
    """x to ``distribution.cdf(x)``, onto the unit interval."""
    codomain = C.unit_interval

    def __init__(self, distribution, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.distribution = distribution
        self.domain = distribution.support

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)


class ConstraintRegistry:
    """Constraint class -> a factory of the transform onto that constraint's support."""

    def __init__(self) -> None:
        self._registry: dict = {}

    def register(self, constraint, factory=None):
        if factory is None:
            return lambda f: self.register(constraint, f)
        key = constraint if isinstance(constraint, type) else type(constraint)
        if not issubclass(key, C.Constraint):
            raise TypeError(f"Expected constraint to be either a Constraint subclass or instance, "
                            f"but got {constraint}")
        self._registry[key] = factory
        return factory

    def __call__(self, constraint) -> Transform:
        factory = self._registry.get(type(constraint))   # (the very class, as torch's)
        if factory is None:
            raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")
        return factory(constraint)


def _greater(c) -> Transform:
    if c.lower_bound == 0:
        return ExpTransform()
    return ComposeTransform([ExpTransform(), AffineTransform(c.lower_bound, 1)])


def _interval(c) -> Transform:
    lo, hi = c.lower_bound, c.upper_bound
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo == 0 and hi == 1:
        return SigmoidTransform()
    return ComposeTransform([SigmoidTransform(), AffineTransform(lo, hi - lo)])


biject_to, transform_to = ConstraintRegistry(), ConstraintRegistry()
for _reg in (biject_to, transform_to):
    _reg.register(C._Real, lambda c: identity_transform)
    _reg.register(C._GreaterThan, _greater)
    _reg.register(C._LessThan, lambda c: ComposeTransform([ExpTransform(), AffineTransform(c.upper_bound, -1)]))
    _reg.register(C._Interval, _interval)
    _reg.register(C._Independent, lambda c, r=_reg: IndependentTransform(r(c.base), c.reinterpreted_batch_ndims))
    _reg.register(C._RealVector, lambda c: IndependentTransform(identity_transform, 1))
biject_to.register(C._Simplex, lambda c: StickBreakingTransform())
transform_to.register(C._Simplex, lambda c: SoftmaxTransform())
transform_to.register(C._LowerCholesky, lambda c: LowerCholeskyTransform())
transform_to.register(C._PositiveDefinite, lambda c: PositiveDefiniteTransform())
for _reg in (biject_to, transform_to):
    _reg.register(C._CorrCholesky, lambda c: CorrCholeskyTransform())
del _reg
