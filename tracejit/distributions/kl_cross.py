"""KL divergences between distributions of different families, the pairs PyTorch registers.

Each is ``-entropy(p) - E_p[log q]``: q's log density is linear in a few statistics of x
(x, x^2, log x, exp(-x / scale), |x - loc|), so one cross term per family of q reads
those statistics of p. Where p's support reaches outside q's the divergence is infinite.
"""
from __future__ import annotations

import math

from .. import ops as _ops
from .discrete import Bernoulli
from .distribution import inf_like as _inf_like, register_kl
from .heavy_tailed import Pareto
from .locscale import _EULER, Gumbel, Laplace
from .more import Beta, Binomial, Exponential, Gamma, Poisson
from .normal_uniform import Normal, Uniform

__all__: list = []


def _infinite(p, q):
    return _inf_like(p.mean)


for _p, _qs in ((Beta, (Pareto,)), (Exponential, (Beta, Pareto, Uniform)), (Gamma, (Beta, Pareto, Uniform)),
                (Gumbel, (Beta, Exponential, Gamma, Pareto, Uniform)),
                (Laplace, (Beta, Exponential, Gamma, Pareto, Uniform)),
                (Normal, (Beta, Exponential, Gamma, Pareto, Uniform)), (Pareto, (Beta,)),
                (Poisson, (Bernoulli, Binomial))):
    for _q in _qs:
        register_kl(_p, _q)(_infinite)


def _xlogx(x):
    return _ops.xlogy(x, x)


def _mean_log(p):
    """E_p[log x] for p on [0, inf)."""
    if isinstance(p, Beta):
        return _ops.digamma(p.concentration1) - _ops.digamma(p.concentration1 + p.concentration0)
    if isinstance(p, Exponential):
        return -_EULER - _ops.log(p.rate)
    return (_xlogx(p.high) - _xlogx(p.low)) / (p.high - p.low) - 1   # (Uniform)


def _scaled_mgf(p, loc, scale):
    """E_p[exp(-(x - loc) / scale)]."""
    if isinstance(p, Exponential):
        return _ops.exp(loc / scale) * p.rate * scale / (p.rate * scale + 1)
    if isinstance(p, Gamma):
        return _ops.exp(loc / scale + p.concentration * _ops.log(p.rate * scale / (p.rate * scale + 1)))
    if isinstance(p, Normal):
        return _ops.exp((loc - p.loc) / scale + 0.5 * (p.scale / scale) ** 2)
    width = (p.high - p.low) / scale   # (Uniform)
    return (_ops.exp(-(p.low - loc) / scale) - _ops.exp(-(p.high - loc) / scale)) / width


def _kl_normal(p, q):
    return (-p.entropy() + _ops.log(q.scale) + 0.5 * math.log(2 * math.pi)
            + (p.variance + (p.mean - q.loc) ** 2) / (2 * q.scale ** 2))


def _kl_exponential(p, q):
    result = -p.entropy() - _ops.log(q.rate) + q.rate * p.mean
    return _ops.where(p.low < 0, _inf_like(result), result) if isinstance(p, Uniform) else result


def _kl_gamma(p, q):
    a, b = q.concentration, q.rate
    result = -p.entropy() + _ops.lgamma(a) - a * _ops.log(b) - (a - 1) * _mean_log(p) + b * p.mean
    return _ops.where(p.low < 0, _inf_like(result), result) if isinstance(p, Uniform) else result


def _kl_gumbel(p, q):
    return -p.entropy() + _ops.log(q.scale) + (p.mean - q.loc) / q.scale + _scaled_mgf(p, q.loc, q.scale)


for _q, _kl, _ps in ((Normal, _kl_normal, (Beta, Exponential, Gamma, Gumbel, Laplace, Uniform)),
                     (Exponential, _kl_exponential, (Beta, Gamma, Uniform)),
                     (Gamma, _kl_gamma, (Beta, Exponential, Uniform)),
                     (Gumbel, _kl_gumbel, (Exponential, Gamma, Normal, Uniform))):
    for _p in _ps:
        register_kl(_p, _q)(_kl)


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    d = p.loc - q.loc   # E|x - q.loc| of a normal x
    mean_abs = (p.scale * math.sqrt(2 / math.pi) * _ops.exp(-0.5 * (d / p.scale) ** 2)
                + d * _ops.erf(d / (p.scale * math.sqrt(2))))
    return -p.entropy() + _ops.log(2 * q.scale) + mean_abs / q.scale


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    a, b = q.concentration1, q.concentration0
    width = p.high - p.low
    mean_log1m = (_xlogx(1 - p.low) - _xlogx(1 - p.high)) / width - 1
    result = (-p.entropy() + _ops.lgamma(a) + _ops.lgamma(b) - _ops.lgamma(a + b)
              - (a - 1) * _mean_log(p) - (b - 1) * mean_log1m)
    return _ops.where((p.high > 1) | (p.low < 0), _inf_like(result), result)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    result = -p.entropy() - _ops.log(q.alpha) - q.alpha * _ops.log(q.scale) + (q.alpha + 1) * _mean_log(p)
    return _ops.where(p.low < q.scale, _inf_like(result), result)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - p.probs * _ops.log(q.rate) + q.rate


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + _ops.log(q.high - q.low)
    return _ops.where((q.low > 0) | (q.high < 1), _inf_like(result), result)
