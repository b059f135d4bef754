"""More of PyTorch's distributions, on the ones in this package: the relaxed (Gumbel-softmax)
Bernoulli and one-hot categorical, the straight-through one-hot categorical, Student's t,
chi-squared and the multinomial, with PyTorch's formulas."""
from __future__ import annotations

import math

import numpy as np

from .. import ops as _ops
from ..tensor import Tensor
from . import constraints
from .discrete import OneHotCategorical, _OverCategorical, _clamp_probs, _probs_or_logits, probs_to_logits
from .distribution import Distribution, broadcast_all
from .more import Gamma, _draw
from .transformed import TransformedDistribution
from .transforms import ExpTransform, SigmoidTransform

__all__ = ["RelaxedBernoulli", "RelaxedOneHotCategorical", "OneHotCategoricalStraightThrough",
           "StudentT", "Chi2", "Multinomial", "LogitRelaxedBernoulli",
           "ExpRelaxedCategorical"]


def _temperature(t, like):
    return t if isinstance(t, Tensor) else _ops.tensor(float(t), dtype=like.dtype)


class LogitRelaxedBernoulli(Distribution):
    """The logit of a relaxed Bernoulli sample (Concrete distribution)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        _probs_or_logits(self, type(self).__name__, probs, logits, validate_args)
        if probs is not None:
            self.logits = probs_to_logits(self.probs, is_binary=True)
        else:
            self.probs = _ops.sigmoid(self.logits)
        self.temperature = _temperature(temperature, self.logits)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        probs = _clamp_probs(self.probs.expand(shape))
        u = _clamp_probs(_ops.rand(*shape, dtype=probs.dtype))
        return (_ops.log(u) - _ops.log1p(-u) + _ops.log(probs) - _ops.log1p(-probs)) / self.temperature

    def log_prob(self, value):
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return _ops.log(self.temperature) + diff - 2 * _ops.log1p(_ops.exp(diff))


class _Relaxed(TransformedDistribution):
    """`_base` (made of the same arguments) pushed through `_transform`, its temperature,
    probs and logits the base's."""
    has_rsample = True
    _base, _transform = None, None

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        super().__init__(self._base(temperature, probs, logits), [self._transform()])

    temperature = property(lambda self: self.base_dist.temperature)
    probs = property(lambda self: self.base_dist.probs)
    logits = property(lambda self: self.base_dist.logits)


class RelaxedBernoulli(_Relaxed):
    """A relaxed Bernoulli in (0, 1): the sigmoid of a `LogitRelaxedBernoulli` sample."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    _base, _transform = LogitRelaxedBernoulli, SigmoidTransform


class ExpRelaxedCategorical(_OverCategorical):
    """The log of a relaxed one-hot categorical sample."""
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        super().__init__(probs, logits, validate_args)
        self.temperature = _temperature(temperature, self.logits)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = _clamp_probs(_ops.rand(*shape, dtype=self.logits.dtype))
        gumbels = -_ops.log(-_ops.log(u))
        scores = (self.logits + gumbels) / self.temperature
        return scores - _ops.logsumexp(scores, -1, keepdim=True)

    def log_prob(self, value):
        k = self._categorical._num_events
        logits, value = broadcast_all(self.logits, value)
        log_scale = math.lgamma(float(k)) + _ops.log(self.temperature) * (k - 1)
        score = logits - value * self.temperature
        score = (score - _ops.logsumexp(score, -1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(_Relaxed):
    """A relaxed one-hot vector on the simplex (Gumbel-softmax with `temperature`)."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    _base, _transform = ExpRelaxedCategorical, ExpTransform


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """One-hot samples whose ``rsample`` passes the gradient of the probabilities through."""
    has_rsample = True

    def rsample(self, sample_shape=()):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())


class Chi2(Gamma):
    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, _ops.full_like(df, 0.5), validate_args=validate_args)

    df = property(lambda self: self.concentration * 2)


class StudentT(Distribution):
    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self._broadcast(validate_args, df=df, loc=loc, scale=scale)
        self._chi2 = Chi2(self.df, validate_args=False)

    @property
    def mean(self):
        return _ops.where(self.df > 1, self.loc, _ops.full_like(self.loc, float("nan")))

    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        df = self.df
        v = self.scale ** 2 * df / (df - 2)
        v = _ops.where(df > 2, v, _ops.full_like(v, float("inf")))
        return _ops.where(df > 1, v, _ops.full_like(v, float("nan")))

    def rsample(self, sample_shape=()):
        """loc + scale * X / sqrt(Z / df), X standard normal, Z ~ Chi2(df) reparameterized."""
        shape = self._extended_shape(sample_shape)
        x = _ops.randn(*shape, dtype=self.df.dtype)
        z = self._chi2.rsample(sample_shape)
        return self.loc + self.scale * x * _ops.rsqrt(z / self.df)

    def log_prob(self, value):
        self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (_ops.log(self.scale) + 0.5 * _ops.log(self.df) + 0.5 * math.log(math.pi)
             + _ops.lgamma(0.5 * self.df) - _ops.lgamma(0.5 * (self.df + 1.0)))
        return -0.5 * (self.df + 1.0) * _ops.log1p(y ** 2 / self.df) - z

    def entropy(self):
        df = self.df
        lbeta = _ops.lgamma(0.5 * df) + math.lgamma(0.5) - _ops.lgamma(0.5 * (df + 1))
        return (_ops.log(self.scale) + 0.5 * (df + 1) * (_ops.digamma(0.5 * (df + 1)) - _ops.digamma(0.5 * df))
                + 0.5 * _ops.log(df) + lbeta)


class Multinomial(_OverCategorical):
    def __init__(self, total_count: int = 1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int) or isinstance(total_count, bool) or total_count < 0:
            raise ValueError(f"Multinomial: total_count must be a non-negative int, got {total_count!r}")
        self.total_count = total_count
        super().__init__(probs, logits, validate_args)
    mean = property(lambda self: self.probs * self.total_count)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))
    support = property(lambda self: constraints.integer_interval(0, self.total_count))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        p = np.broadcast_to(self.probs.detach().numpy().astype(np.float64), shape)
        flat = p.reshape(-1, shape[-1])
        p_norm = flat / flat.sum(-1, keepdims=True)
        counts = _draw(lambda rng, s: np.stack([rng.multinomial(self.total_count, row) for row in p_norm])
                       .reshape(s), shape, self.probs)
        return counts

    def entropy(self):
        n = self.total_count
        p = self.probs
        term1 = n * self._categorical.entropy() - math.lgamma(n + 1)
        if n == 0:
            return term1
        k = _ops.arange(1, n + 1, dtype=p.dtype).reshape((n,) + (1,) * p.dim())
        log_binom = (math.lgamma(n + 1) - _ops.lgamma(k + 1) - _ops.lgamma(n - k + 1)
                     + _ops.xlogy(k, p) + _ops.xlogy(n - k, 1 - p))
        return term1 + (_ops.exp(log_binom) * _ops.lgamma(k + 1)).sum(0).sum(-1)

    def log_prob(self, value):
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = _ops.lgamma(value.sum(-1) + 1)
        log_factorial_xs = _ops.lgamma(value + 1).sum(-1)
        logits = _ops.where((value == 0) & _ops.isinf(logits), _ops.zeros_like(logits), logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)
