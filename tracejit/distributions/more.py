"""More distributions with PyTorch's parameterizations: Exponential (reparameterized),
Gamma, Beta, Dirichlet (reparameterized
through gamma draws with implicit gradients), Poisson, Geometric, Binomial (sampled from
tracejit's generator, no rsample), MultivariateNormal (through the Cholesky factor,
reparameterized) and Independent (batch dims read as event dims)."""
from __future__ import annotations

import math

import numpy as np

from .. import ops as _ops
from ..ops import random as _random
from . import constraints
from .discrete import _one_given
from .distribution import Distribution, broadcast_all, register_kl
from .exp_family import ExponentialFamily
from .implicit import reparameterized_dirichlet, reparameterized_gamma

__all__ = ["Exponential", "Gamma", "Beta", "Dirichlet", "Poisson", "Geometric", "Binomial", "MultivariateNormal",
           "Independent"]


def _standard_gamma(alpha):
    """Gamma(alpha, 1) draws of alpha's shape with alpha's implicit gradient."""
    draws = _draw(lambda rng, s: rng.standard_gamma(np.asarray(alpha.detach().numpy(), np.float64), s),
                  tuple(alpha.shape), alpha)
    tiny = float(np.finfo(alpha.dtype.np).tiny)
    return reparameterized_gamma(alpha, draws.clamp(min=tiny))


def _clamp_unit(x):
    """`x` kept inside (0, 1) in its dtype (gradients pass where no clamp applies)."""
    finfo = np.finfo(x.dtype.np)
    return x.clamp(float(finfo.tiny), 1 - float(finfo.eps))


def _draw(fn, shape, like):
    """Draws from tracejit's generator (numpy's `Generator.<fn>`), as a tensor like `like`."""
    arr = np.asarray(fn(_random.global_rng(), tuple(shape)), dtype=like.dtype.np)
    return _ops.tensor(arr, device=like.device)


class Exponential(ExponentialFamily):
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, rate, validate_args=None):
        self._broadcast(validate_args, rate=rate)

    _natural_params = property(lambda self: (-self.rate,))

    def _log_normalizer(self, x):
        return -_ops.log(-x)

    mean = property(lambda self: 1 / self.rate)
    mode = property(lambda self: self.rate * 0)
    variance = property(lambda self: self.rate ** -2)

    def rsample(self, sample_shape=()):
        return -_ops.log1p(-self._uniform(sample_shape, self.rate)) / self.rate

    def log_prob(self, value):
        self._validate_sample(value)
        return _ops.log(self.rate) - self.rate * value

    def cdf(self, value):
        return 1 - _ops.exp(-self.rate * value)

    def icdf(self, value):
        return -_ops.log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - _ops.log(self.rate)


class Gamma(ExponentialFamily):
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self._broadcast(validate_args, concentration=concentration, rate=rate)

    mean = property(lambda self: self.concentration / self.rate)
    mode = property(lambda self: ((self.concentration - 1) / self.rate).clamp(min=0))
    variance = property(lambda self: self.concentration / self.rate ** 2)

    def rsample(self, sample_shape=()):
        """Gamma draws with PyTorch's implicit reparameterization gradient in the
        concentration (`implicit.standard_gamma_grad`) and the pathwise one in the rate."""
        shape = self._extended_shape(sample_shape)
        g = _standard_gamma(self.concentration.expand(shape))
        value = g / self.rate.expand(shape)
        return value.clamp(min=float(np.finfo(self.rate.dtype.np).tiny))

    _natural_params = property(lambda self: (self.concentration - 1, -self.rate))

    def _log_normalizer(self, x, y):
        return _ops.lgamma(x + 1) + (x + 1) * _ops.log(-1 / y)

    def log_prob(self, value):
        self._validate_sample(value)
        a, b = self.concentration, self.rate
        return a * _ops.log(b) + (a - 1) * _ops.log(value) - b * value - _ops.lgamma(a)

    def entropy(self):
        a = self.concentration
        return a - _ops.log(self.rate) + _ops.lgamma(a) + (1 - a) * _ops.digamma(a)

    def cdf(self, value):
        self._validate_sample(value)
        from ..special import gammainc
        return gammainc(self.concentration, self.rate * value)


class Beta(ExponentialFamily):
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self._broadcast(validate_args, concentration1=concentration1, concentration0=concentration0)

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):   # (PyTorch's: the first coordinate of Dirichlet((c1, c0))'s mode)
        return Dirichlet(_ops.stack([self.concentration1, self.concentration0], -1), validate_args=False).mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total ** 2 * (total + 1))

    def rsample(self, sample_shape=()):
        """x = g1 / (g1 + g0) of two gamma draws, with PyTorch's gradient: the first
        coordinate of Dirichlet((concentration1, concentration0)) draws."""
        shape = tuple(self._extended_shape(sample_shape)) + (2,)
        c = _ops.stack([self.concentration1, self.concentration0], -1).expand(shape)
        g = _standard_gamma(c.detach())
        x = _clamp_unit(g[..., :1] / g.sum(-1, keepdim=True))
        return reparameterized_dirichlet(c, _ops.cat([x, 1 - x], -1))[..., 0]

    _natural_params = property(lambda self: (self.concentration1, self.concentration0))

    def _log_normalizer(self, x, y):
        return _ops.lgamma(x) + _ops.lgamma(y) - _ops.lgamma(x + y)

    def _lbeta(self):
        return self._log_normalizer(self.concentration1, self.concentration0)

    def log_prob(self, value):
        self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        return (a - 1) * _ops.log(value) + (b - 1) * _ops.log1p(-value) - self._lbeta()

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        t = a + b
        return (self._lbeta() - (a - 1) * _ops.digamma(a) - (b - 1) * _ops.digamma(b)
                + (t - 2) * _ops.digamma(t))


class Dirichlet(ExponentialFamily):
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.ndim < 1:
            raise ValueError("Dirichlet: `concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(tuple(concentration.shape[:-1]), tuple(concentration.shape[-1:]),
                         validate_args=validate_args)

    mean = property(lambda self: self.concentration / self.concentration.sum(-1, keepdim=True))

    @property
    def mode(self):
        """(c - 1)+ normalized; where every concentration is below 1, PyTorch's one-hot of
        that (all nan) row's argmax: the first class."""
        c = self.concentration
        m1 = (c - 1).clamp(min=0.0)
        first = _ops.cast(_ops.arange(c.shape[-1], device=c.device) == 0, c.dtype)
        return _ops.where((c < 1).all(-1, keepdim=True), first, m1 / m1.sum(-1, keepdim=True))

    @property
    def variance(self):
        c0 = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (c0 - self.concentration) / (c0 ** 2 * (c0 + 1))

    def rsample(self, sample_shape=()):
        """Normalized gamma draws with PyTorch's implicit gradient (each coordinate a
        Beta draw: `implicit.dirichlet_grad`)."""
        c = self.concentration.expand(self._extended_shape(sample_shape))
        g = _standard_gamma(c.detach())
        return reparameterized_dirichlet(c, _clamp_unit(g / g.sum(-1, keepdim=True)))

    _natural_params = property(lambda self: (self.concentration,))

    def _log_normalizer(self, x):
        return _ops.lgamma(x).sum(-1) - _ops.lgamma(x.sum(-1))

    def log_prob(self, value):
        self._validate_sample(value)
        c = self.concentration
        return (_ops.xlogy(c - 1, value).sum(-1) + _ops.lgamma(c.sum(-1)) - _ops.lgamma(c).sum(-1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        c0 = c.sum(-1)
        return (_ops.lgamma(c).sum(-1) - _ops.lgamma(c0) - (k - c0) * _ops.digamma(c0)
                - ((c - 1) * _ops.digamma(c)).sum(-1))


class Poisson(ExponentialFamily):
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        self._broadcast(validate_args, rate=rate)

    mean = property(lambda self: self.rate)
    mode = property(lambda self: self.rate.floor())
    variance = property(lambda self: self.rate)
    _natural_params = property(lambda self: (_ops.log(self.rate),))

    def _log_normalizer(self, x):
        return _ops.exp(x)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        lam = np.broadcast_to(self.rate.detach().numpy(), shape)
        return _draw(lambda rng, s: rng.poisson(lam, s), shape, self.rate)

    def log_prob(self, value):
        self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return _ops.xlogy(value, rate) - rate - _ops.lgamma(value + 1)


class Geometric(Distribution):
    """Number of failures before the first success, success probability ``probs``."""
    arg_constraints = {"probs": constraints.unit_interval}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_given(probs, logits, "Geometric")
        self._broadcast(validate_args, probs=probs if probs is not None else _ops.sigmoid(logits))

    mean = property(lambda self: 1.0 / self.probs - 1.0)
    mode = property(lambda self: self.probs * 0)
    variance = property(lambda self: (1.0 / self.probs - 1.0) / self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        tiny = float(np.finfo(self.probs.dtype.np).tiny)
        u = _ops.rand(*shape, dtype=self.probs.dtype).clamp(min=tiny)
        return (_ops.log(u) / _ops.log1p(-self.probs.detach())).floor()

    def log_prob(self, value):
        self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        p = probs.clamp(max=1 - float(np.finfo(probs.dtype.np).eps))
        return value * _ops.log1p(-p) + _ops.log(probs)

    def entropy(self):
        p = self.probs
        return _ops.binary_cross_entropy_with_logits(_ops.log(p) - _ops.log1p(-p), p,
                                                     reduction="none") / p


class Binomial(Distribution):
    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        _one_given(probs, logits, "Binomial")
        self._broadcast(validate_args, total_count=total_count,
                        probs=probs if probs is not None else _ops.sigmoid(logits))
        self.total_count = self.total_count.to(self.probs.dtype)

    @property
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    mean = property(lambda self: self.total_count * self.probs)
    mode = property(lambda self: ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count))
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        n = np.broadcast_to(self.total_count.detach().numpy(), shape).astype(np.int64)
        p = np.broadcast_to(self.probs.detach().numpy(), shape)
        return _draw(lambda rng, s: rng.binomial(n, p, s), shape, self.probs)

    def log_prob(self, value):
        self._validate_sample(value)
        n, k, p = self.total_count, value, self.probs
        eps = float(np.finfo(p.dtype.np).eps)
        pc = p.clamp(eps, 1 - eps)
        log_comb = _ops.lgamma(n + 1) - _ops.lgamma(k + 1) - _ops.lgamma(n - k + 1)
        return log_comb + k * _ops.log(pc) + (n - k) * _ops.log1p(-pc)

    def enumerate_support(self, expand: bool = True):
        n = int(self.total_count.max())
        if not bool((self.total_count == n).all()):
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        values = _ops.arange(1 + n, dtype=self.probs.dtype).reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((1 + n,) + tuple(self.batch_shape)) if expand else values

    def entropy(self):
        log_prob = self.log_prob(self.enumerate_support(False))   # (the support's counts, all n)
        return -(_ops.exp(log_prob) * log_prob).sum(0)


def scale_tril_of(scale_tril, covariance_matrix, precision_matrix):
    """The lower Cholesky factor of whichever of the three a distribution was given."""
    from ..ops.linalg_dense import cholesky, inv
    if scale_tril is not None:
        return scale_tril
    if covariance_matrix is not None:
        return cholesky(covariance_matrix)
    return cholesky(inv(precision_matrix))


def tri_solve(L, B):
    """L^-1 B for lower-triangular L (batch dims broadcast); what lies above L's diagonal
    is never read, so it gets no gradient."""
    from ..ops.linalg_factor import solve_triangular
    from ..shapes import broadcast_shapes
    batch = tuple(broadcast_shapes("solve_triangular", tuple(L.shape[:-2]), tuple(B.shape[:-2])))
    return solve_triangular(L.expand(batch + tuple(L.shape[-2:])), B.expand(batch + tuple(B.shape[-2:])),
                            upper=False)


class MultivariateNormal(Distribution):
    """PyTorch's: the parameters are broadcast to the batch shape (loc, and the matrix
    given as an attribute of its name); the algebra reads the unbroadcast Cholesky factor's
    lower triangle only."""
    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        given = {k: m for k, m in (("covariance_matrix", covariance_matrix), ("precision_matrix", precision_matrix),
                                   ("scale_tril", scale_tril)) if m is not None}
        if len(given) != 1:
            raise ValueError("MultivariateNormal: exactly one of covariance_matrix, precision_matrix "
                             "or scale_tril may be specified.")
        if loc.ndim < 1:
            raise ValueError("MultivariateNormal: loc must be at least one-dimensional.")
        (name, matrix), = given.items()
        if matrix.ndim < 2:
            raise ValueError(f"MultivariateNormal: {name} must be at least two-dimensional, "
                             f"with optional leading batch dimensions")
        d = loc.shape[-1]
        batch = tuple(np.broadcast_shapes(tuple(loc.shape[:-1]), tuple(matrix.shape[:-2])))
        self.__dict__[name] = matrix.expand(batch + tuple(matrix.shape[-2:]))   # (read before the properties)
        self._unbroadcasted_scale_tril = scale_tril_of(scale_tril, covariance_matrix, precision_matrix)
        self.loc = loc.expand(batch + (d,))
        super().__init__(batch, (d,), validate_args=validate_args)

    def _full(self, x, event_dims: int):
        return x.expand(tuple(self._batch_shape) + tuple(self._event_shape) * event_dims)

    @property
    def scale_tril(self):
        return self.__dict__.get("scale_tril", self._full(self._unbroadcasted_scale_tril, 2))

    @property
    def covariance_matrix(self):
        if "covariance_matrix" in self.__dict__:
            return self.__dict__["covariance_matrix"]
        lo = self._unbroadcasted_scale_tril
        return self._full(lo @ lo.transpose(-1, -2), 2)

    @property
    def precision_matrix(self):
        if "precision_matrix" in self.__dict__:
            return self.__dict__["precision_matrix"]
        from ..linalg import cholesky_inverse
        return self._full(cholesky_inverse(self._unbroadcasted_scale_tril), 2)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    @property
    def variance(self):
        return self._full((self._unbroadcasted_scale_tril ** 2).sum(-1), 1)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _ops.randn(*shape, dtype=self.loc.dtype)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self):
        return _ops.log(self._unbroadcasted_scale_tril.diagonal(0, -2, -1)).sum(-1)

    def log_prob(self, value):
        self._validate_sample(value)
        z = tri_solve(self._unbroadcasted_scale_tril, (value - self.loc).unsqueeze(-1))
        m = (z * z).sum((-2, -1))
        d = self._event_shape[0]
        return -0.5 * (d * math.log(2 * math.pi) + m) - self._half_log_det()

    def entropy(self):
        d = self._event_shape[0]
        h = 0.5 * d * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h.expand(tuple(self._batch_shape)) if len(self._batch_shape) else h


class Independent(Distribution):
    """`base_distribution` with its last `reinterpreted_batch_ndims` batch dims as event dims:
    log_prob and entropy sum over them."""

    def __init__(self, base_distribution, reinterpreted_batch_ndims: int, validate_args=None):
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        k = len(base_distribution.event_shape) + reinterpreted_batch_ndims
        if reinterpreted_batch_ndims > len(base_distribution.batch_shape):
            raise ValueError(f"Independent: reinterpreted_batch_ndims {reinterpreted_batch_ndims} exceeds "
                             f"the batch dims of {base_distribution!r}")
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, reinterpreted_batch_ndims
        super().__init__(shape[:len(shape) - k], shape[len(shape) - k:], validate_args=False)

    has_rsample = property(lambda self: self.base_dist.has_rsample)
    mean = property(lambda self: self.base_dist.mean)
    mode = property(lambda self: self.base_dist.mode)
    variance = property(lambda self: self.base_dist.variance)
    support = property(lambda self: self.base_dist.support)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def _sum_rightmost(self, x):
        from .transforms import _sum_rightmost
        return _sum_rightmost(x, self.reinterpreted_batch_ndims)

    def log_prob(self, value):
        return self._sum_rightmost(self.base_dist.log_prob(value))

    def entropy(self):
        return self._sum_rightmost(self.base_dist.entropy())


@register_kl(Exponential, Exponential)
def _kl_exponential(p, q):
    ratio = q.rate / p.rate
    return ratio - 1 - _ops.log(ratio)


@register_kl(Independent, Independent)
def _kl_independent(p, q):
    from .distribution import kl_divergence
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("KL(Independent || Independent) needs the same reinterpreted dims")
    return p._sum_rightmost(kl_divergence(p.base_dist, q.base_dist))


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event shapes "
                         "cannot be computed")
    d = p.event_shape[0]
    lq, lp = q._unbroadcasted_scale_tril, p._unbroadcasted_scale_tril
    half_term1 = q._half_log_det() - p._half_log_det()
    term2 = (tri_solve(lq, lp) ** 2).sum((-2, -1))
    term3 = (tri_solve(lq, (q.loc - p.loc).unsqueeze(-1)) ** 2).sum((-2, -1))
    return half_term1 + 0.5 * (term2 + term3 - d)


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    return (q.concentration * _ops.log(p.rate / q.rate) + _ops.lgamma(q.concentration) - _ops.lgamma(p.concentration)
            + (p.concentration - q.concentration) * _ops.digamma(p.concentration)
            + (q.rate - p.rate) * (p.concentration / p.rate))


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    sp, sq = p.concentration1 + p.concentration0, q.concentration1 + q.concentration0
    return (q._lbeta() - p._lbeta() + (p.concentration1 - q.concentration1) * _ops.digamma(p.concentration1)
            + (p.concentration0 - q.concentration0) * _ops.digamma(p.concentration0)
            + (sq - sp) * _ops.digamma(sp))


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sp, sq = p.concentration.sum(-1), q.concentration.sum(-1)
    t2 = (_ops.lgamma(p.concentration) - _ops.lgamma(q.concentration)).sum(-1)
    t4 = _ops.digamma(p.concentration) - _ops.digamma(sp).unsqueeze(-1)
    return _ops.lgamma(sp) - _ops.lgamma(sq) - t2 + ((p.concentration - q.concentration) * t4).sum(-1)


@register_kl(Geometric, Geometric)
def _kl_geometric(p, q):
    return -p.entropy() - (p.mean * _ops.log1p(-q.probs) + _ops.log(q.probs))


@register_kl(Binomial, Binomial)
def _kl_binomial(p, q):
    """Infinite where p has more trials than q (its support reaches past q's); PyTorch does
    not define fewer."""
    if bool((p.total_count < q.total_count).any()):
        raise NotImplementedError("KL(Binomial || Binomial) with fewer trials in p than in q is not implemented")
    a, b = p.probs, q.probs
    kl = p.total_count * (_ops.xlogy(a, a) - _ops.xlogy(a, b) + _ops.xlogy(1 - a, 1 - a) - _ops.xlogy(1 - a, 1 - b))
    return _ops.where(p.total_count > q.total_count, float("inf"), kl)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (_ops.log(p.rate) - _ops.log(q.rate)) - (p.rate - q.rate)
