"""Constraints on parameters and values (``torch.distributions.constraints``): each has
``check(value) -> bool tensor``."""
from __future__ import annotations

__all__ = ["Constraint", "real", "positive", "nonnegative", "unit_interval", "simplex", "boolean",
           "nonnegative_integer", "positive_definite", "real_vector", "interval", "half_open_interval",
           "integer_interval", "greater_than", "independent", "lower_cholesky", "corr_cholesky"]


class Constraint:
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


class _Real(Constraint):
    def check(self, value):
        return value == value            # not NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound, strict: bool = True):
        self.lower_bound, self.strict = lower_bound, strict

    def check(self, value):
        return value > self.lower_bound if self.strict else value >= self.lower_bound


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound, half_open: bool = False):
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def check(self, value):
        upper = value < self.upper_bound if self.half_open else value <= self.upper_bound
        return (value >= self.lower_bound) & upper


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)


class _NonnegativeInteger(Constraint):
    is_discrete = True

    def check(self, value):
        return (value % 1 == 0) & (value >= 0)


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _RealVector(Constraint):
    event_dim = 1

    def check(self, value):
        return (value == value).all(-1)


class _PositiveDefinite(Constraint):
    event_dim = 2

    def check(self, value):
        import numpy as np

        from ..ops.creation import tensor
        a = value.detach().numpy()
        sym = np.isclose(a, np.swapaxes(a, -1, -2), atol=1e-6).all((-2, -1))
        with np.errstate(invalid="ignore"):
            ok = sym & (np.linalg.eigvalsh(np.where(sym[..., None, None], a, 0)).min(-1) > 0)
        return tensor(ok)


class _LowerCholesky(Constraint):
    """Lower-triangular square matrices with a positive diagonal."""
    event_dim = 2

    def check(self, value):
        from ..ops.tensorfns import tril
        lower = (tril(value) == value).all(-1).all(-1)
        return lower & (value.diagonal(0, -2, -1) > 0).all(-1)


class _CorrCholesky(_LowerCholesky):
    """Cholesky factors of correlation matrices: lower Cholesky with rows of unit length."""

    def check(self, value):
        import numpy as np
        tol = float(np.finfo(value.dtype.np).eps) * value.shape[-1] * 10
        row_norm = (value.detach() ** 2).sum(-1).sqrt()
        return super().check(value) & ((row_norm - 1.0).abs() <= tol).all(-1)


class _Independent(Constraint):
    def __init__(self, base, reinterpreted_batch_ndims: int):
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.event_dim = base.event_dim + reinterpreted_batch_ndims

    def check(self, value):
        r = self.base.check(value)
        for _ in range(self.reinterpreted_batch_ndims):
            r = r.all(-1)
        return r


real = _Real()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThan(0.0, strict=False)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
boolean = _Boolean()
nonnegative_integer = _NonnegativeInteger()
positive_definite = _PositiveDefinite()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
real_vector = _RealVector()
interval = _Interval
half_open_interval = lambda lo, hi: _Interval(lo, hi, half_open=True)  # noqa: E731
integer_interval = _IntegerInterval
greater_than = _GreaterThan
independent = _Independent
