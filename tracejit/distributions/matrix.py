"""Distributions of vectors and matrices through Cholesky factors, with PyTorch's
parameterizations: LowRankMultivariateNormal (covariance W W^T + diag(D), its algebra
through the m x m capacitance matrix I + W^T D^-1 W), Wishart (Bartlett's decomposition,
reparameterized through chi-squared draws) and LKJCholesky (Cholesky factors of
correlation matrices, the onion method), with the KL pairs PyTorch registers.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import ops as _ops
from ..errors import ShapeError
from ..tensor import Tensor
from . import constraints
from .distribution import Distribution, broadcast_all, register_kl
from .exp_family import ExponentialFamily
from .more import Beta, MultivariateNormal, scale_tril_of, tri_solve as _tri_solve

__all__ = ["LowRankMultivariateNormal", "Wishart", "LKJCholesky"]

_LOG_2 = math.log(2)


def _mT(x):
    return x.transpose(-1, -2)


def _half_log_det(L):
    return _ops.log(L.diagonal(0, -2, -1)).sum(-1)


def _mahalanobis(L, x):
    """x^T (L L^T)^-1 x for each vector x (batch dims broadcast)."""
    return (_tri_solve(L, x.unsqueeze(-1)) ** 2).sum((-2, -1))


def _with_unit_diagonal(k):
    return k + _ops.eye(k.shape[-1], dtype=k.dtype, device=k.device)


def _capacitance_tril(W, D):
    from ..ops.linalg_dense import cholesky
    wt_dinv = _mT(W) / D.unsqueeze(-2)
    return cholesky(_with_unit_diagonal(wt_dinv @ W))


def _lowrank_logdet(D, capacitance_tril):
    return 2 * _half_log_det(capacitance_tril) + _ops.log(D).sum(-1)


def _lowrank_mahalanobis(W, D, x, capacitance_tril):
    wt_dinv_x = ((_mT(W) / D.unsqueeze(-2)) @ x.unsqueeze(-1)).squeeze(-1)
    return (x ** 2 / D).sum(-1) - _mahalanobis(capacitance_tril, wt_dinv_x)


def _trace_xxt(x):
    return (x ** 2).sum((-2, -1))


class LowRankMultivariateNormal(Distribution):
    arg_constraints = {"loc": constraints.real_vector, "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        if loc.ndim < 1:
            raise ValueError("LowRankMultivariateNormal: loc must be at least one-dimensional.")
        n = loc.shape[-1]
        if cov_factor.ndim < 2:
            raise ValueError("LowRankMultivariateNormal: cov_factor must be at least two-dimensional, with "
                             "optional leading batch dimensions")
        if cov_factor.shape[-2] != n:
            raise ValueError(f"LowRankMultivariateNormal: cov_factor must be a batch of matrices with shape "
                             f"{n} x m, got {tuple(cov_factor.shape)}")
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise ValueError(f"LowRankMultivariateNormal: cov_diag must be a batch of vectors with shape ({n},), "
                             f"got {tuple(cov_diag.shape)}")
        from ..shapes import broadcast_shapes
        try:
            batch = tuple(broadcast_shapes("LowRankMultivariateNormal", tuple(loc.shape[:-1]),
                                           tuple(cov_factor.shape[:-2]), tuple(cov_diag.shape[:-1])))
        except (ShapeError, ValueError, RuntimeError) as e:
            raise ValueError(f"LowRankMultivariateNormal: incompatible batch shapes: loc {tuple(loc.shape)}, "
                             f"cov_factor {tuple(cov_factor.shape)}, cov_diag {tuple(cov_diag.shape)}") from e
        self.loc = loc.expand(batch + (n,))
        self.cov_diag = cov_diag.expand(batch + (n,))
        self.cov_factor = cov_factor.expand(batch + tuple(cov_factor.shape[-2:]))
        self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag = cov_factor, cov_diag
        self._capacitance_tril = _capacitance_tril(cov_factor, cov_diag)
        super().__init__(batch, (n,), validate_args=validate_args)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    def _full(self, x, event_dims: int):
        return x.expand(tuple(self._batch_shape) + tuple(x.shape[x.ndim - event_dims:]))

    @property
    def variance(self):
        return self._full((self._unbroadcasted_cov_factor ** 2).sum(-1) + self._unbroadcasted_cov_diag, 1)

    @property
    def scale_tril(self):
        from ..ops.linalg_dense import cholesky
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        w = self._unbroadcasted_cov_factor / d_sqrt
        return self._full(d_sqrt * cholesky(_with_unit_diagonal(w @ _mT(w))), 2)

    @property
    def covariance_matrix(self):
        w = self._unbroadcasted_cov_factor
        return self._full(w @ _mT(w) + _ops.diag_embed(self._unbroadcasted_cov_diag), 2)

    @property
    def precision_matrix(self):
        wt_dinv = _mT(self._unbroadcasted_cov_factor) / self._unbroadcasted_cov_diag.unsqueeze(-2)
        a = _tri_solve(self._capacitance_tril, wt_dinv)
        return self._full(_ops.diag_embed(1 / self._unbroadcasted_cov_diag) - _mT(a) @ a, 2)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        eps_w = _ops.randn(*(shape[:-1] + tuple(self.cov_factor.shape[-1:])), dtype=self.loc.dtype)
        eps_d = _ops.randn(*shape, dtype=self.loc.dtype)
        return (self.loc + (self._unbroadcasted_cov_factor @ eps_w.unsqueeze(-1)).squeeze(-1)
                + self._unbroadcasted_cov_diag.sqrt() * eps_d)

    def _log_det(self):
        return _lowrank_logdet(self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value):
        self._validate_sample(value)
        m = _lowrank_mahalanobis(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag,
                                 value - self.loc, self._capacitance_tril)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._log_det() + m)

    def entropy(self):
        h = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._log_det())
        return h.expand(tuple(self._batch_shape)) if len(self._batch_shape) else h


def _same_events(p, q):
    if tuple(p.event_shape) != tuple(q.event_shape):
        raise ValueError(f"KL-divergence between {type(p).__name__} and {type(q).__name__} with different "
                         f"event shapes ({tuple(p.event_shape)} and {tuple(q.event_shape)}) cannot be computed")


def _lowrank_q_terms(p, q):
    """log det(q) and the Mahalanobis term of q at p's mean, and A = C_q^-1 W_q^T D_q^-1."""
    W, D, C = q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril
    a = _tri_solve(C, _mT(W) / D.unsqueeze(-2))
    return _lowrank_logdet(D, C), _lowrank_mahalanobis(W, D, q.loc - p.loc, C), a


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p, q):
    _same_events(p, q)
    logdet_q, term3, a = _lowrank_q_terms(p, q)
    term1 = logdet_q - p._log_det()
    pw, pd, qd = p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag, q._unbroadcasted_cov_diag
    term2 = ((pd / qd).sum(-1) + _trace_xxt(pw * _ops.rsqrt(qd).unsqueeze(-1))
             - _trace_xxt(a * pd.sqrt().unsqueeze(-2)) - _trace_xxt(a @ pw))
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_mvn_lowrank(p, q):
    _same_events(p, q)
    logdet_q, term3, a = _lowrank_q_terms(p, q)
    lp = p._unbroadcasted_scale_tril
    term1 = logdet_q - 2 * _half_log_det(lp)
    term2 = (_trace_xxt(lp * _ops.rsqrt(q._unbroadcasted_cov_diag).unsqueeze(-1)) - _trace_xxt(a @ lp))
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrank_mvn(p, q):
    _same_events(p, q)
    lq = q._unbroadcasted_scale_tril
    term1 = 2 * _half_log_det(lq) - p._log_det()
    term3 = _mahalanobis(lq, q.loc - p.loc)
    term2 = (_trace_xxt(_tri_solve(lq, p._unbroadcasted_cov_factor))
             + _trace_xxt(_tri_solve(lq, _ops.diag_embed(p._unbroadcasted_cov_diag.sqrt()))))
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


# ---------------------------------------------------------------- Wishart
def _mvdigamma(x, p: int):
    k = _ops.arange(p, dtype=x.dtype) / 2
    return _ops.digamma(x.unsqueeze(-1) - k).sum(-1)


class Wishart(ExponentialFamily):
    """Wishart(df, V): the law of X^T X for df rows X_i ~ N(0, V) (any real df > p - 1)."""
    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise ValueError("Wishart: exactly one of covariance_matrix or precision_matrix or scale_tril may "
                             "be specified.")
        param = given[0]
        if param.ndim < 2:
            raise ValueError("Wishart: the scale matrix must be at least two-dimensional, with optional leading "
                             "batch dimensions")
        p = param.shape[-1]
        if isinstance(df, Tensor):
            batch = tuple(np.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(batch)
        else:
            batch = tuple(param.shape[:-2])
            self.df = _ops.full(batch, float(df), dtype=param.dtype, device=param.device)
        if bool((self.df <= p - 1).any()):
            raise ValueError(f"Wishart: value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        name = "scale_tril" if scale_tril is not None else \
            "covariance_matrix" if covariance_matrix is not None else "precision_matrix"
        self.__dict__[name] = param.expand(batch + (p, p))
        if bool((self.df < p).any()):
            warnings.warn("Low df values detected. Singular samples are highly likely to occur for "
                          "ndim - 1 < df < ndim.", stacklevel=2)
        super().__init__(batch, (p, p), validate_args=validate_args)
        self._unbroadcasted_scale_tril = scale_tril_of(scale_tril, covariance_matrix, precision_matrix)

    def __getattr__(self, name):
        lo = self.__dict__.get("_unbroadcasted_scale_tril")
        if lo is None or name not in ("scale_tril", "covariance_matrix", "precision_matrix"):
            raise AttributeError(name)
        if name == "scale_tril":
            v = lo
        elif name == "covariance_matrix":
            v = lo @ _mT(lo)
        else:
            eye = _ops.eye(lo.shape[-1], dtype=lo.dtype, device=lo.device)
            linv = _tri_solve(lo, eye)
            v = _mT(linv) @ linv
        v = v.expand(tuple(self._batch_shape) + tuple(self._event_shape))
        self.__dict__[name] = v
        return v

    def _chi2(self):
        from .relaxed import Chi2
        p = self._event_shape[-1]
        k = _ops.arange(p, dtype=self._unbroadcasted_scale_tril.dtype)
        return Chi2(self.df.unsqueeze(-1) - k, validate_args=False)

    def _df_matrix(self, x):
        return x.reshape(tuple(self._batch_shape) + (1, 1))

    @property
    def mean(self):
        return self._df_matrix(self.df) * self.covariance_matrix

    @property
    def mode(self):
        factor = self.df - self._event_shape[-1] - 1
        factor = _ops.where(factor <= 0, _ops.full_like(factor, float("nan")), factor)
        return self._df_matrix(factor) * self.covariance_matrix

    @property
    def variance(self):
        v = self.covariance_matrix
        d = v.diagonal(0, -2, -1)
        return self._df_matrix(self.df) * (v ** 2 + d.unsqueeze(-1) * d.unsqueeze(-2))

    def _bartlett(self, sample_shape):
        p = self._event_shape[-1]
        eps = float(np.finfo(self.df.dtype.np).eps)
        diag = self._chi2().rsample(sample_shape).sqrt().clamp(min=eps)
        lead = tuple(sample_shape) + tuple(self._batch_shape)
        lower = _ops.tril(_ops.randn(*(lead + (p, p)), dtype=diag.dtype), -1)
        chol = self._unbroadcasted_scale_tril @ (lower + _ops.diag_embed(diag))
        return chol @ _mT(chol)

    def rsample(self, sample_shape=(), max_try_correction=None):
        """Bartlett draws; singular ones (possible for df < p) are drawn again, at most
        `max_try_correction` (10) times, with a warning."""
        tries = 10 if max_try_correction is None else int(max_try_correction)
        sample = self._bartlett(sample_shape)
        bad = ~self.support.check(sample)
        if bool(bad.any()):
            warnings.warn("Singular sample detected.", stacklevel=2)
            for _ in range(tries):
                sample = _ops.where(bad.unsqueeze(-1).unsqueeze(-1), self._bartlett(sample_shape), sample)
                bad = ~self.support.check(sample)
                if not bool(bad.any()):
                    break
        return sample

    def _log_norm_part(self):
        p = self._event_shape[-1]
        return p * _LOG_2 / 2 + _half_log_det(self._unbroadcasted_scale_tril)

    def log_prob(self, value):
        from ..ops.linalg_dense import slogdet
        self._validate_sample(value)
        nu, p = self.df, self._event_shape[-1]
        lo = self._unbroadcasted_scale_tril
        z = _tri_solve(lo, value)
        trace = _mT(_tri_solve(lo, _mT(z))).diagonal(0, -2, -1).sum(-1)   # tr(V^-1 X)
        return (-nu * self._log_norm_part() - _ops.mvlgamma(nu / 2, p) + (nu - p - 1) / 2 * slogdet(value)[1]
                - trace / 2)

    def entropy(self):
        nu, p = self.df, self._event_shape[-1]
        return ((p + 1) * self._log_norm_part() + _ops.mvlgamma(nu / 2, p)
                - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

    @property
    def _natural_params(self):
        nu, p = self.df, self._event_shape[-1]
        return (-self.precision_matrix / 2, (nu - p - 1) / 2)

    def _log_normalizer(self, x, y):
        from ..ops.linalg_dense import slogdet
        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-slogdet(-2 * x)[1] + _LOG_2 * p) + _ops.mvlgamma(y + (p + 1) / 2, p))


# ---------------------------------------------------------------- LKJCholesky
class LKJCholesky(Distribution):
    """Cholesky factors L of dim x dim correlation matrices with density proportional to
    det(L L^T)^(concentration - 1), drawn by the onion method (Lewandowski, Kurowicka &
    Joe, 2009): row i is sqrt(y_i) times a uniform direction, y_i ~ Beta."""
    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args=None):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 2:
            raise ValueError(f"LKJCholesky: expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        c = self.concentration
        marginal = c + 0.5 * (dim - 2)
        offset = _ops.cat([_ops.zeros(1, dtype=c.dtype), _ops.arange(dim - 1, dtype=c.dtype)])
        self._beta = Beta(offset + 0.5, marginal.unsqueeze(-1) - 0.5 * offset, validate_args=False)
        super().__init__(tuple(c.shape), (dim, dim), validate_args=validate_args)

    def sample(self, sample_shape=()):
        from ..autograd.grad_mode import no_grad
        with no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u = _ops.tril(_ops.randn(*self._extended_shape(sample_shape), dtype=y.dtype), -1)
            u = u / (u ** 2).sum(-1, keepdim=True).sqrt()
            first = _ops.cast(_ops.arange(self.dim) > 0, y.dtype).unsqueeze(-1)   # row 0 has no direction
            u = _ops.where(first > 0, u, _ops.zeros_like(u))
            w = y.sqrt() * u
            tiny = float(np.finfo(w.dtype.np).tiny)
            diag = (1 - (w ** 2).sum(-1)).clamp(min=tiny).sqrt()
            return w + _ops.diag_embed(diag)

    def log_prob(self, value):
        self._validate_sample(value)
        dm1 = self.dim - 1
        diag = value.diagonal(0, -2, -1)[..., 1:]
        order = _ops.arange(2, self.dim + 1, dtype=value.dtype)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized = (order * _ops.log(diag)).sum(-1)
        alpha = self.concentration + 0.5 * dm1
        normalize = 0.5 * dm1 * math.log(math.pi) + _ops.mvlgamma(alpha - 0.5, dm1) - _ops.lgamma(alpha) * dm1
        return unnormalized - normalize
