"""Weibull, Pareto, Kumaraswamy (reparameterized through a uniform or exponential draw),
InverseGamma, FisherSnedecor and NegativeBinomial (drawn from tracejit's generator), with
PyTorch's parameterizations, moments and the Pareto KL pairs PyTorch registers.

PyTorch builds several of these as transformed distributions; the closed forms here give
the same values. InverseGamma and FisherSnedecor are reparameterized through Gamma's
implicit gradients (``implicit.py``), as PyTorch's are.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops as _ops
from . import constraints
from .discrete import _probs_or_logits
from .distribution import Distribution, inf_like as _inf_like, register_kl
from .locscale import _EULER
from .more import Exponential, Gamma, _draw
from .normal_uniform import Normal, Uniform

__all__ = ["Weibull", "Pareto", "Kumaraswamy", "InverseGamma", "FisherSnedecor", "NegativeBinomial"]


def _unit_exponential(d, sample_shape, like):
    """Exponential(1) draws of the sample's shape, in `like`'s dtype."""
    return -_ops.log1p(-d._uniform(sample_shape, like))


class Weibull(Distribution):
    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, scale, concentration, validate_args=None):
        self._broadcast(validate_args, scale=scale, concentration=concentration)

    @property
    def mean(self):
        return self.scale * _ops.exp(_ops.lgamma(1 + 1 / self.concentration))

    @property
    def mode(self):
        k = self.concentration
        return self.scale * (((k - 1) / k) ** (1 / k)).clamp(min=0)

    @property
    def variance(self):
        k = self.concentration
        return self.scale ** 2 * (_ops.exp(_ops.lgamma(1 + 2 / k)) - _ops.exp(2 * _ops.lgamma(1 + 1 / k)))

    def rsample(self, sample_shape=()):
        return self.scale * _unit_exponential(self, sample_shape, self.scale) ** (1 / self.concentration)

    def log_prob(self, value):
        self._validate_sample(value)
        k, lam = self.concentration, self.scale
        z = value / lam
        return _ops.log(k / lam) + (k - 1) * _ops.log(z) - z ** k

    def cdf(self, value):
        return -_ops.expm1(-(value / self.scale) ** self.concentration)

    def icdf(self, value):
        return self.scale * (-_ops.log1p(-value)) ** (1 / self.concentration)

    def entropy(self):
        k = self.concentration
        return _EULER * (1 - 1 / k) + _ops.log(self.scale / k) + 1


class Pareto(Distribution):
    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}
    has_rsample = True

    def __init__(self, scale, alpha, validate_args=None):
        self._broadcast(validate_args, scale=scale, alpha=alpha)

    @property
    def support(self):
        return constraints.greater_than(self.scale, strict=False)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    mode = property(lambda self: self.scale)

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)
        return self.scale ** 2 * a / ((a - 1) ** 2 * (a - 2))

    def rsample(self, sample_shape=()):
        return self.scale * _ops.exp(_unit_exponential(self, sample_shape, self.scale) / self.alpha)

    def log_prob(self, value):
        self._validate_sample(value)
        return _ops.log(self.alpha) + self.alpha * _ops.log(self.scale) - (self.alpha + 1) * _ops.log(value)

    def cdf(self, value):
        return 1 - (self.scale / value) ** self.alpha

    def icdf(self, value):
        return self.scale * _ops.exp(-_ops.log1p(-value) / self.alpha)

    def entropy(self):
        return _ops.log(self.scale / self.alpha) + 1 / self.alpha + 1


class Kumaraswamy(Distribution):
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self._broadcast(validate_args, concentration1=concentration1, concentration0=concentration0)

    def _moment(self, n: int):
        a, b = self.concentration1, self.concentration0
        arg = 1 + n / a
        return b * _ops.exp(_ops.lgamma(arg) + _ops.lgamma(b) - _ops.lgamma(arg + b))

    mean = property(lambda self: self._moment(1))
    variance = property(lambda self: self._moment(2) - self._moment(1) ** 2)

    def rsample(self, sample_shape=()):
        return self.icdf(self._uniform(sample_shape, self.concentration1))

    def log_prob(self, value):
        self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        # PyTorch's arithmetic: a uniform u pushed through u**(1/b), 1 - u and u**(1/a), each
        # map's log-determinant taken off at the values it saw (nan at 0 and 1, as there)
        x = value ** a
        lp = -_ops.log(_ops.abs(value / (a * x)))
        u = (1 - x) ** b
        lp = lp - _ops.log(_ops.abs((1 - x) / (b * u)))
        return lp + _ops.log(((u >= 0) & (u < 1)).to(value.dtype))

    def cdf(self, value):
        return 1 - (1 - value ** self.concentration1) ** self.concentration0

    def icdf(self, value):
        return (1 - (1 - value) ** (1 / self.concentration0)) ** (1 / self.concentration1)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        harmonic = _ops.digamma(b + 1) + _EULER
        return (1 - 1 / b) + (1 - 1 / a) * harmonic - _ops.log(a) - _ops.log(b)


class InverseGamma(Distribution):
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self._broadcast(validate_args, concentration=concentration, rate=rate)

    @property
    def mean(self):
        a = self.concentration
        return _ops.where(a > 1, self.rate / (a - 1), _inf_like(a))

    mode = property(lambda self: self.rate / (self.concentration + 1))

    @property
    def variance(self):
        a = self.concentration
        return _ops.where(a > 2, self.rate ** 2 / ((a - 1) ** 2 * (a - 2)), _inf_like(a))

    def rsample(self, sample_shape=()):
        return 1 / Gamma(self.concentration, self.rate, validate_args=False).rsample(sample_shape)

    def cdf(self, value):   # (PyTorch's: 1 / X of a Gamma, a decreasing map)
        return 1 - Gamma(self.concentration, self.rate, validate_args=False).cdf(1 / value)

    def log_prob(self, value):
        self._validate_sample(value)
        a, b = self.concentration, self.rate
        return a * _ops.log(b) - _ops.lgamma(a) - (a + 1) * _ops.log(value) - b / value

    def entropy(self):
        a = self.concentration
        return a + _ops.log(self.rate) + _ops.lgamma(a) - (1 + a) * _ops.digamma(a)


class FisherSnedecor(Distribution):
    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self._broadcast(validate_args, df1=df1, df2=df2)

    @property
    def mean(self):
        d2 = self.df2
        return _ops.where(d2 > 2, d2 / (d2 - 2), d2.detach() * float("nan"))

    @property
    def mode(self):
        d1, d2 = self.df1, self.df2
        return _ops.where(d1 > 2, (d1 - 2) / d1 * d2 / (d2 + 2), d1.detach() * float("nan"))

    @property
    def variance(self):
        d1, d2 = self.df1, self.df2
        v = 2 * d2 ** 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ** 2 * (d2 - 4))
        return _ops.where(d2 > 4, v, d2.detach() * float("nan"))

    def rsample(self, sample_shape=()):
        """X1 / X2 of X_i ~ Gamma(df_i / 2, df_i / 2), reparameterized."""
        tiny = float(np.finfo(self.df1.dtype.np).tiny)
        x1 = Gamma(self.df1 * 0.5, self.df1 * 0.5, validate_args=False).rsample(sample_shape)
        x2 = Gamma(self.df2 * 0.5, self.df2 * 0.5, validate_args=False).rsample(sample_shape)
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value):
        self._validate_sample(value)
        h1, h2, ratio = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
        norm = _ops.lgamma(h1 + h2) - _ops.lgamma(h1) - _ops.lgamma(h2)
        return norm + h1 * _ops.log(ratio) + (h1 - 1) * _ops.log(value) - (h1 + h2) * _ops.log1p(ratio * value)


class NegativeBinomial(Distribution):
    """Number of successes before ``total_count`` failures, success probability ``probs``."""
    arg_constraints = {"total_count": constraints.nonnegative, "probs": constraints.half_open_interval(0.0, 1.0),
                       "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        _probs_or_logits(self, "NegativeBinomial", probs, logits, validate_args, total_count=total_count)
        if probs is not None:
            self.logits = _ops.log(self.probs) - _ops.log1p(-self.probs)
        else:
            self.probs = _ops.sigmoid(self.logits)

    mean = property(lambda self: self.total_count * _ops.exp(self.logits))

    @property
    def mode(self):
        return ((self.total_count - 1) * _ops.exp(self.logits)).floor().clamp(min=0.0)

    variance = property(lambda self: self.mean / _ops.sigmoid(-self.logits))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        r = np.broadcast_to(self.total_count.detach().numpy(), shape)
        q = np.broadcast_to((1 - self.probs).detach().numpy(), shape)
        return _draw(lambda rng, s: rng.negative_binomial(r, q, s), shape, self.probs)

    def log_prob(self, value):
        self._validate_sample(value)
        r, lg = self.total_count, self.logits
        unnormalized = r * _ops.logsigmoid(-lg) + value * _ops.logsigmoid(lg)
        # P(0) = 1 when total_count is 0: lgamma(0) terms replaced by lgamma(1) = 0
        r = _ops.where(r + value == 0, r.detach() * 0 + 1, r)
        norm = -_ops.lgamma(r + value) + _ops.lgamma(1 + value) + _ops.lgamma(r)
        return unnormalized - norm


# ---------------------------------------------------------------- KL divergences
def _inf_where(result, cond):
    return _ops.where(cond, _inf_like(result), result)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * _ops.log(p.scale / q.scale) - _ops.log(alpha_ratio) + alpha_ratio - 1
    return _inf_where(result, p.scale < q.scale)


@register_kl(Pareto, Uniform)
def _kl_pareto_infinity(p, q):
    return _inf_like(p.scale)


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    sr = p.scale * q.rate
    result = _ops.log(p.alpha / sr) - 1 / p.alpha + p.alpha * sr / (p.alpha - 1) - 1
    return _inf_where(result, p.alpha <= 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common = _ops.log(p.scale) + 1 / p.alpha
    a, b = q.concentration, q.rate
    result = (_ops.log(p.alpha) - common + _ops.lgamma(a) - a * _ops.log(b) + (1 - a) * common
              + b * p.alpha * p.scale / (p.alpha - 1) - 1)
    return _inf_where(result, p.alpha <= 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var2 = 2 * q.scale ** 2
    common = p.scale / (p.alpha - 1)
    t1 = _ops.log(math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale)
    t3 = p.alpha * common ** 2 / (p.alpha - 2)
    t4 = (p.alpha * common - q.loc) ** 2
    return _inf_where(t1 - 1 / p.alpha + (t3 + t4) / var2 - 1, p.alpha <= 2)
