"""The location-scale families beside Normal, with PyTorch's parameterizations and
formulas (reparameterized): Laplace, Cauchy, Gumbel, HalfNormal, HalfCauchy, LogNormal."""
from __future__ import annotations

import math

import numpy as np

from .. import ops as _ops
from . import constraints
from .distribution import Distribution, LocScale, register_kl
from .normal_uniform import Normal, _kl_normal_normal

__all__ = ["Laplace", "Cauchy", "Gumbel", "HalfNormal", "HalfCauchy", "LogNormal"]

_EULER = 0.5772156649015329


class Laplace(LocScale):
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: 2 * self.scale ** 2)

    def rsample(self, sample_shape=()):
        u = self._uniform(sample_shape, self.loc) * 2 - 1
        eps = float(np.finfo(self.loc.dtype.np).eps)
        u = u.clamp(-1 + eps, 1)
        return self.loc - self.scale * _ops.sign(u) * _ops.log1p(-u.abs())

    def log_prob(self, value):
        self._validate_sample(value)
        return -_ops.log(2 * self.scale) - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        return 0.5 - 0.5 * _ops.sign(value - self.loc) * _ops.expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * _ops.sign(term) * _ops.log1p(-2 * term.abs())

    def entropy(self):
        return 1 + _ops.log(2 * self.scale)


class Cauchy(LocScale):
    mean = property(lambda self: self.loc * float("nan"))
    mode = property(lambda self: self.loc)
    variance = property(lambda self: self.loc * 0 + float("inf"))

    def rsample(self, sample_shape=()):
        u = self._uniform(sample_shape, self.loc)
        return self.loc + self.scale * _ops.tan(math.pi * (u - 0.5))

    def log_prob(self, value):
        self._validate_sample(value)
        return -math.log(math.pi) - _ops.log(self.scale) - _ops.log1p(((value - self.loc) / self.scale) ** 2)

    def cdf(self, value):
        return _ops.atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return _ops.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + _ops.log(self.scale)


class Gumbel(LocScale):
    mean = property(lambda self: self.loc + self.scale * _EULER)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: (math.pi ** 2 / 6) * self.scale ** 2)

    def rsample(self, sample_shape=()):
        u = self._uniform(sample_shape, self.loc)
        eps = float(np.finfo(self.loc.dtype.np).tiny)
        return self.loc - self.scale * _ops.log(-_ops.log(u.clamp(eps, 1 - 1e-7)))

    def log_prob(self, value):
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -(z + _ops.exp(-z)) - _ops.log(self.scale)

    def cdf(self, value):
        return _ops.exp(-_ops.exp(-(value - self.loc) / self.scale))

    def icdf(self, value):
        return self.loc - self.scale * _ops.log(-_ops.log(value))

    def entropy(self):
        return _ops.log(self.scale) + (1 + _EULER)


class _Half(Distribution):
    """|X| of X from the zero-location `_family` of scale `scale` (PyTorch's, as a
    transformed distribution)."""
    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _family: type

    def __init__(self, scale, validate_args=None):
        self._broadcast(validate_args, scale=scale)
        self._base = self._family(0.0 * self.scale, self.scale, validate_args=False)

    def rsample(self, sample_shape=()):
        return self._base.rsample(sample_shape).abs()

    def log_prob(self, value):
        self._validate_sample(value)
        lp = self._base.log_prob(value) + math.log(2)
        return _ops.where(value >= 0, lp, _ops.full_like(lp, -float("inf")))

    def cdf(self, value):
        return 2 * self._base.cdf(value) - 1

    def icdf(self, prob):
        return self._base.icdf((prob + 1) / 2)


class HalfNormal(_Half):
    _family = Normal
    mean = property(lambda self: self.scale * math.sqrt(2 / math.pi))
    mode = property(lambda self: self.scale * 0)
    variance = property(lambda self: self.scale ** 2 * (1 - 2 / math.pi))

    def entropy(self):
        return 0.5 * math.log(math.pi / 2) + _ops.log(self.scale) + 0.5


class HalfCauchy(_Half):
    _family = Cauchy
    mean = property(lambda self: _ops.full_like(self.scale, float("inf")))
    mode = property(lambda self: _ops.zeros_like(self.scale))
    variance = property(lambda self: _ops.full_like(self.scale, float("inf")))

    def entropy(self):
        return self._base.entropy() - math.log(2)


class LogNormal(LocScale):
    support = constraints.positive

    def __init__(self, loc, scale, validate_args=None):
        super().__init__(loc, scale, validate_args=validate_args)
        self._base = Normal(self.loc, self.scale, validate_args=False)

    mean = property(lambda self: _ops.exp(self.loc + self.scale ** 2 / 2))
    mode = property(lambda self: _ops.exp(self.loc - self.scale ** 2))
    variance = property(lambda self: _ops.expm1(self.scale ** 2) * _ops.exp(2 * self.loc + self.scale ** 2))

    def rsample(self, sample_shape=()):
        return _ops.exp(self._base.rsample(sample_shape))

    def log_prob(self, value):
        self._validate_sample(value)
        return self._base.log_prob(_ops.log(value)) - _ops.log(value)

    def cdf(self, value):   # (PyTorch's: exp of a Normal)
        return self._base.cdf(_ops.log(value))

    def icdf(self, value):
        return _ops.exp(self._base.icdf(value))

    def entropy(self):
        return self._base.entropy() + self.loc


@register_kl(LogNormal, LogNormal)
def _kl_lognormal(p, q):
    return _kl_normal_normal(p._base, q._base)   # (exp maps both alike: the divergence stays)


@register_kl(Laplace, Laplace)
def _kl_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    return -_ops.log(scale_ratio) + loc_abs_diff / q.scale + scale_ratio * _ops.exp(-loc_abs_diff / p.scale) - 1


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal(p, q):
    return _kl_normal_normal(p._base, q._base)


@register_kl(Gumbel, Gumbel)
def _kl_gumbel(p, q):
    ct1, ct2, ct3 = p.scale / q.scale, q.loc / q.scale, p.loc / q.scale
    t3 = _ops.exp(ct2 + _ops.lgamma(1 + ct1) - ct3)
    return -_ops.log(ct1) - ct2 + ct3 + ct1 * _EULER + t3 - (1 + _EULER)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy(p, q):   # (arXiv 1905.10965)
    return _ops.log((p.scale + q.scale) ** 2 + (p.loc - q.loc) ** 2) - _ops.log(4 * p.scale * q.scale)
