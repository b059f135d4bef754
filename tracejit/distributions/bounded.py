"""VonMises (an angle, sampled by Best and Fisher's rejection method), ContinuousBernoulli
(a density on [0, 1], reparameterized through its icdf), GeneralizedPareto
(reparameterized through its icdf) and LogisticNormal (stick breaking of a normal), with PyTorch's parameterizations, numerically stable
branches and the ContinuousBernoulli KL pairs PyTorch registers.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops as _ops
from . import constraints
from .discrete import _clamp_probs, _derived, _one_given
from .distribution import Distribution, broadcast_all, inf_like as _inf_like, register_kl
from .exp_family import ExponentialFamily
from .heavy_tailed import Pareto
from .locscale import Gumbel, Laplace
from .more import Beta, Exponential, Gamma, Independent
from .normal_uniform import Normal, Uniform
from .transformed import TransformedDistribution
from .transforms import StickBreakingTransform

__all__ = ["VonMises", "ContinuousBernoulli", "GeneralizedPareto", "LogisticNormal"]

# log I0 and log I1 by Abramowitz & Stegun 9.8.1-9.8.4 (the polynomials PyTorch evaluates,
# so log_prob and the variance agree with it to rounding): in (x / 3.75)^2 below 3.75, in
# 3.75 / x (times e^x / sqrt(x)) above
_I_SMALL = ((1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2),
            (0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2, 0.32411e-3))
_I_LARGE = ((0.39894228, 0.1328592e-1, 0.225319e-2, -0.157565e-2, 0.916281e-2, -0.2057706e-1,
             0.2635537e-1, -0.1647633e-1, 0.392377e-2),
            (0.39894228, -0.3988024e-1, -0.362018e-2, 0.163801e-2, -0.1031555e-1, 0.2282967e-1,
             -0.2895312e-1, 0.1787654e-1, -0.420059e-2))


def _poly(y, coef):
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


def _log_bessel(x, order: int):
    """log I_order(x) for x > 0, order 0 or 1."""
    small = _poly((x / 3.75) ** 2, _I_SMALL[order])
    if order == 1:
        small = x.abs() * small
    large = x - 0.5 * _ops.log(x) + _ops.log(_poly(3.75 / x, _I_LARGE[order]))
    return _ops.where(x < 3.75, _ops.log(small), large)


class VonMises(Distribution):
    """A circular distribution: `loc` and values are angles (any real, read modulo 2 pi)."""
    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real

    def __init__(self, loc, concentration, validate_args=None):
        self._broadcast(validate_args, loc=loc, concentration=concentration)

    def log_prob(self, value):
        self._validate_sample(value)
        return (self.concentration * _ops.cos(value - self.loc) - math.log(2 * math.pi)
                - _log_bessel(self.concentration, 0))

    def sample(self, sample_shape=()):
        """Best & Fisher (1979) rejection sampling, in float64 (small concentrations need it)."""
        from ..ops import random as _random
        shape = tuple(self._extended_shape(sample_shape))
        kappa = np.broadcast_to(self.concentration.detach().numpy().astype(np.float64), shape)
        loc = np.broadcast_to(self.loc.detach().numpy().astype(np.float64), shape)
        tau = 1 + np.sqrt(1 + 4 * kappa ** 2)
        rho = (tau - np.sqrt(2 * tau)) / (2 * kappa)
        r = np.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho ** 2) / (2 * rho))
        x = np.zeros(shape)
        done = np.zeros(shape, bool)
        while not done.all():
            u1, u2, u3 = _random.global_rng().random((3,) + shape)
            z = np.cos(math.pi * u1)
            f = (1 + r * z) / (r + z)
            c = kappa * (r - f)
            with np.errstate(divide="ignore", invalid="ignore"):
                accept = ((c * (2 - c) - u2) > 0) | (np.log(c / u2) + 1 - c >= 0)
            accept &= ~done
            x = np.where(accept, np.sign(u3 - 0.5) * np.arccos(np.clip(f, -1, 1)), x)
            done |= accept
        out = (x + math.pi + loc) % (2 * math.pi) - math.pi
        return _ops.tensor(out, dtype=self.loc.dtype, device=self.loc.device)

    mean = property(lambda self: self.loc, doc="The circular mean.")
    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        """The circular variance 1 - I1(k) / I0(k)."""
        c = self.concentration
        return 1 - _ops.exp(_log_bessel(c, 1) - _log_bessel(c, 0))


class ContinuousBernoulli(ExponentialFamily):
    """The density proportional to p^x (1 - p)^(1 - x) on [0, 1] (Loaiza-Ganem & Cunningham,
    2019). Near p = 1/2 (between `lims`) the closed forms lose precision, so Taylor
    expansions stand in, as in PyTorch."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        _one_given(probs, logits, "ContinuousBernoulli")
        if probs is not None:
            (p,) = broadcast_all(probs)
            if validate_args is not False and not constraints.unit_interval.holds(p):
                raise ValueError(f"Expected parameter probs of ContinuousBernoulli to satisfy the "
                                 f"constraint {constraints.unit_interval!r}, but found invalid values:\n{p}")
            self.probs = _clamp_probs(p)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        self._lims = lims
        super().__init__(tuple(self._param.shape), validate_args=validate_args)

    def __getattr__(self, name):
        v = _derived(self, name, True)
        if name == "probs":     # (clamped, as the given probs are)
            v = self.__dict__["probs"] = _clamp_probs(v)
        return v

    param_shape = property(lambda self: self._param.shape)

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return _ops.where(self._outside_unstable_region(), self.probs,
                          _ops.full_like(self.probs, self._lims[0]))

    def _cont_bern_log_norm(self):
        cut = self._cut_probs()
        below = _ops.where(cut <= 0.5, cut, _ops.zeros_like(cut))
        above = _ops.where(cut >= 0.5, cut, _ops.ones_like(cut))
        log_norm = (_ops.log(_ops.abs(_ops.log1p(-cut) - _ops.log(cut)))
                    - _ops.where(cut <= 0.5, _ops.log1p(-2.0 * below), _ops.log(2.0 * above - 1.0)))
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return _ops.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / (_ops.log1p(-cut) - _ops.log(cut))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x
        return _ops.where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self):
        cut = self._cut_probs()
        v = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / (_ops.log1p(-cut) - _ops.log(cut)) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return _ops.where(self._outside_unstable_region(), v, taylor)

    def rsample(self, sample_shape=()):
        return self.icdf(self._uniform(sample_shape, self.probs))

    def log_prob(self, value):
        self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return (-_ops.binary_cross_entropy_with_logits(logits, value, reduction="none")
                + self._cont_bern_log_norm())

    def cdf(self, value):
        self._validate_sample(value)
        cut = self._cut_probs()
        cdfs = (cut ** value * (1.0 - cut) ** (1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        inner = _ops.where(self._outside_unstable_region(), cdfs, value)
        return _ops.where(value <= 0.0, _ops.zeros_like(inner),
                          _ops.where(value >= 1.0, _ops.ones_like(inner), inner))

    def icdf(self, value):
        cut = self._cut_probs()
        closed = ((_ops.log1p(-cut + value * (2.0 * cut - 1.0)) - _ops.log1p(-cut))
                  / (_ops.log(cut) - _ops.log1p(-cut)))
        return _ops.where(self._outside_unstable_region(), closed, value)

    def entropy(self):
        log_p0, log_p1 = _ops.log1p(-self.probs), _ops.log(self.probs)
        return self.mean * (log_p0 - log_p1) - self._cont_bern_log_norm() - log_p0

    _natural_params = property(lambda self: (self.logits,))

    def _log_normalizer(self, x):
        outside = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut = _ops.where(outside, x, _ops.full_like(x, self._lims[0] - 0.5))
        log_norm = _ops.log(_ops.abs(_ops.expm1(cut))) - _ops.log(_ops.abs(cut))
        taylor = 0.5 * x + x ** 2 / 24.0 - x ** 4 / 2880.0
        return _ops.where(outside, log_norm, taylor)


class GeneralizedPareto(Distribution):
    """Generalized Pareto with `loc`, `scale` > 0 and shape `concentration` (any real; 0
    is the exponential, negative ones have a finite upper end loc - scale / concentration)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self._broadcast(validate_args, loc=loc, scale=scale, concentration=concentration)

    def _safe_concentration(self):
        c = self.concentration
        eq_zero = _ops.isclose(c, _ops.zeros_like(c))
        return eq_zero, _ops.where(eq_zero, _ops.ones_like(c), c)

    def rsample(self, sample_shape=()):
        return self.icdf(self._uniform(sample_shape, self.loc))

    def log_prob(self, value):
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, c = self._safe_concentration()
        y = 1 / c + _ops.ones_like(z)
        nonzero = _ops.where(y == 0, y, y * _ops.log1p(c * z))
        return -_ops.log(self.scale) - _ops.where(eq_zero, z, nonzero)

    def log_survival_function(self, value):
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, c = self._safe_concentration()
        return _ops.where(eq_zero, -z, -_ops.log1p(c * z) / c)

    def log_cdf(self, value):
        return _ops.log1p(-_ops.exp(self.log_survival_function(value)))

    def cdf(self, value):
        return _ops.exp(self.log_cdf(value))

    def icdf(self, value):
        eq_zero, c = self._safe_concentration()
        logu = _ops.log1p(-value)
        return _ops.where(eq_zero, self.loc - self.scale * logu,
                          self.loc + self.scale / c * _ops.expm1(-c * logu))

    @property
    def mean(self):
        c = self.concentration
        valid = c < 1
        safe = _ops.where(valid, c, _ops.full_like(c, 0.5))
        return _ops.where(valid, self.loc + self.scale / (1 - safe), _ops.full_like(c, float("nan")))

    @property
    def variance(self):
        c = self.concentration
        valid = c < 0.5
        safe = _ops.where(valid, c, _ops.full_like(c, 0.25))
        v = self.scale ** 2 / ((1 - safe) ** 2 * (1 - 2 * safe))
        return _ops.where(valid, v, _ops.full_like(c, float("nan")))

    mode = property(lambda self: self.loc)

    def entropy(self):
        return (_ops.log(self.scale) + self.concentration + 1).expand(tuple(self._batch_shape))

    @property
    def support(self):
        upper = _ops.where(self.concentration < 0, self.loc - self.scale / self.concentration,
                           _ops.full_like(self.loc, float("inf")))
        return constraints.interval(self.loc, upper)


# ---------------------------------------------------------------- KL pairs
def _cb_cross(p, q):
    """-E_p[log q] minus the entropy of p, for q continuous Bernoulli and p on [0, 1]."""
    return -p.entropy() - p.mean * q.logits - _ops.log1p(-q.probs) - q._cont_bern_log_norm()


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_cb_cb(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + _ops.log1p(-p.probs)
    t3 = -q._cont_bern_log_norm() - _ops.log1p(-q.probs)
    return t1 + t2 + t3


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_cb(p, q):
    return _cb_cross(p, q)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_cb(p, q):
    result = _cb_cross(p, q)
    return _ops.where((p.high >= 1.0) | (p.low <= 0.0), _inf_like(result), result)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_cb_exponential(p, q):
    return -p.entropy() - _ops.log(q.rate) + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_cb_normal(p, q):
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale) ** 2) + _ops.log(q.scale)
    t3 = (p.variance + p.mean ** 2 - 2.0 * q.loc * p.mean) / (2.0 * q.scale ** 2)
    return -p.entropy() + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_cb_uniform(p, q):
    result = -p.entropy() + _ops.log(q.high - q.low)
    return _ops.where((q.low >= 0.0) | (q.high <= 1.0), _inf_like(result), result)


@register_kl(ContinuousBernoulli, Pareto)
def _kl_cb_infinity(p, q):
    return _inf_like(p.probs)


def _kl_to_cb_infinity(p, q):
    return _inf_like(p.mean)


for _p in (Exponential, Gamma, Gumbel, Laplace, Normal, Pareto):
    register_kl(_p, ContinuousBernoulli)(_kl_to_cb_infinity)


class LogisticNormal(TransformedDistribution):
    """The stick-breaking image on the simplex of Normal(loc, scale) over its last dim
    (K - 1 normal coordinates give a point of the K-simplex)."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        base = Normal(loc, scale, validate_args=validate_args)
        if not len(base.batch_shape):
            base = base.expand((1,))
        super().__init__(Independent(base, 1), [StickBreakingTransform()], validate_args=validate_args)

    loc = property(lambda self: self.base_dist.base_dist.loc)
    scale = property(lambda self: self.base_dist.base_dist.scale)
