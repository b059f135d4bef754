"""Normal and Uniform: continuous, reparameterized (``rsample`` carries gradients to loc,
scale, low and high)."""
from __future__ import annotations

import math

from .. import ops as _ops
from ..tensor import Tensor
from . import constraints
from .distribution import Distribution, LocScale, register_kl
from .exp_family import ExponentialFamily

__all__ = ["Normal", "Uniform"]


class Normal(LocScale, ExponentialFamily):
    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale * self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _ops.randn(*shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        self._validate_sample(value)
        var = self.scale * self.scale
        log_scale = _ops.log(self.scale) if isinstance(self.scale, Tensor) else math.log(self.scale)
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + _ops.log(self.scale)

    @property
    def _natural_params(self):
        return (self.loc / self.scale ** 2, -0.5 / self.scale ** 2)

    def _log_normalizer(self, x, y):
        return -0.25 * x ** 2 / y + 0.5 * _ops.log(-math.pi / y)

    def cdf(self, value):
        return 0.5 * (1 + _ops.erf((value - self.loc) / (self.scale * math.sqrt(2))))

    def icdf(self, value):
        return self.loc + self.scale * _ops.erfinv(2 * value - 1) * math.sqrt(2)


class Uniform(Distribution):
    arg_constraints = {"low": constraints.real, "high": constraints.real}
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self._broadcast(validate_args, low=low, high=high)
        if self._validate_args and not bool((self.low < self.high).all()):
            raise ValueError(f"Uniform: expected low < high, got low={self.low} and high={self.high}")

    @property
    def support(self):
        return constraints.interval(self.low, self.high, half_open=True)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.low * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = _ops.rand(*shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        self._validate_sample(value)
        inside = _ops.cast((self.low <= value) & (value < self.high), self.low.dtype)
        return _ops.log(inside) - _ops.log(self.high - self.low)

    def cdf(self, value):
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return _ops.log(self.high - self.low)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - _ops.log(var_ratio))


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = _ops.log((q.high - q.low) / (p.high - p.low))
    outside = (q.low > p.low) | (q.high < p.high)
    return _ops.where(outside, float("inf"), result)
