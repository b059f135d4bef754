"""Categorical, Bernoulli and OneHotCategorical: discrete, no reparameterized sample.

Given as ``probs`` (normalized over the last dim for Categorical) or ``logits`` (log-odds
for Bernoulli, unnormalized log-probabilities for Categorical), as in PyTorch; the other
form is derived. ``log_prob`` and ``entropy`` are differentiable in either.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from .. import ops as _ops
from ..shapes import broadcast_shapes as _broadcast_shapes
from ..tensor import Tensor
from . import constraints
from .distribution import Distribution, broadcast_all, register_kl
from .exp_family import ExponentialFamily

__all__ = ["Categorical", "Bernoulli", "OneHotCategorical"]


def _one_given(probs, logits, name):
    if (probs is None) == (logits is None):
        raise ValueError(f"{name}: either `probs` or `logits` must be specified, but not both.")


def _probs_or_logits(d, name: str, probs, logits, validate_args, **others) -> None:
    """`d`'s parameter: whichever of `probs` and `logits` is given (exactly one must be),
    broadcast with `others` and kept as ``d._param`` too; the batch shape theirs."""
    _one_given(probs, logits, name)
    given = "probs" if probs is not None else "logits"
    d._broadcast(validate_args, **others, **{given: probs if probs is not None else logits})
    d._param = d.__dict__[given]


def _clamp_probs(p):
    eps = float(np.finfo(p.dtype.np).eps)
    return p.clamp(eps, 1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    """``torch.distributions.utils.probs_to_logits``: log-odds (binary) or log-probabilities."""
    p = _clamp_probs(probs)
    return _ops.log(p) - _ops.log1p(-p) if is_binary else _ops.log(p)


def logits_to_probs(logits, is_binary: bool = False):
    """``torch.distributions.utils.logits_to_probs``: sigmoid (binary) or softmax over the last dim."""
    return _ops.sigmoid(logits) if is_binary else _ops.softmax(logits, -1)


def _derived(d, name: str, binary: bool):
    """`d.probs` or `d.logits` when it is the parameter not given: made from the other on
    first use and kept (PyTorch's lazy_property)."""
    if name == "probs":
        v = logits_to_probs(d.__dict__["logits"], binary)
    elif name == "logits":
        v = probs_to_logits(d.__dict__["probs"], binary)
    else:
        raise AttributeError(name)
    d.__dict__[name] = v
    return v


class Categorical(Distribution):
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_given(probs, logits, "Categorical")
        if probs is not None:
            if probs.ndim < 1:
                raise ValueError("Categorical: `probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self._param = self.probs
        else:
            if logits.ndim < 1:
                raise ValueError("Categorical: `logits` parameter must be at least one-dimensional.")
            self.logits = logits - _ops.logsumexp(logits, -1, keepdim=True)
            self._param = self.logits
        self._num_events = self._param.shape[-1]
        super().__init__(tuple(self._param.shape[:-1]), validate_args=validate_args)

    def __getattr__(self, name):
        return _derived(self, name, False)

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    param_shape = property(lambda self: self._param.shape)

    mean = variance = property(lambda self: _ops.full(tuple(self.batch_shape), float("nan"),
                                                      dtype=self.probs.dtype))
    mode = property(lambda self: self.probs.argmax(-1))

    def sample(self, sample_shape=()):
        sample_shape = tuple(sample_shape)
        n = int(np.prod(sample_shape)) if sample_shape else 1
        p2 = self.probs.detach().reshape(-1, self._num_events)
        draws = _ops.multinomial(p2, n, True)                 # (batch, n)
        out = draws.t().reshape(sample_shape + tuple(self.batch_shape))
        return out

    def log_prob(self, value):
        self._validate_sample(value)
        value = value.long() if isinstance(value, Tensor) else _ops.tensor(value, dtype=_dt.int64)
        value, logits = value.unsqueeze(-1), self.logits
        # (broadcast in Python: numpy's broadcast_shapes costs more than the gather; a
        # side already of the broadcast shape is no expand op)
        vs, ls = tuple(value.shape), tuple(logits.shape)
        shape = _broadcast_shapes("Categorical.log_prob", vs[:-1], ls[:-1])
        if vs[:-1] != shape:
            value = value.expand(shape + (1,))
        if ls[:-1] != shape:
            logits = logits.expand(shape + (self._num_events,))
        return _ops.gather(logits, -1, value).squeeze(-1)

    def entropy(self):
        min_real = float(np.finfo(self.logits.dtype.np).min)
        logits = self.logits.clamp(min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        values = _ops.arange(self._num_events, dtype=_dt.int64)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        if expand:
            values = values.expand((self._num_events,) + tuple(self.batch_shape))
        return values


class _OverCategorical(Distribution):
    """A distribution of vectors over a `Categorical`'s events (one-hot draws, counts,
    relaxed one-hot draws): its probs and logits, one event dim of its event count."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits, validate_args=False)
        super().__init__(tuple(self._categorical.batch_shape), (self._categorical._num_events,),
                         validate_args=validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)


class OneHotCategorical(_OverCategorical):
    support = constraints.one_hot
    has_enumerate_support = True

    mean = property(lambda self: self._categorical.probs)
    mode = property(lambda self: self._one_hot(self.probs.argmax(-1)))
    variance = property(lambda self: self._categorical.probs * (1 - self._categorical.probs))

    def _one_hot(self, idx):
        return _ops.cast(_ops.one_hot(idx, self._categorical._num_events), self.probs.dtype)

    def sample(self, sample_shape=()):
        return self._one_hot(self._categorical.sample(sample_shape))

    def log_prob(self, value):
        self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        return self._one_hot(self._categorical.enumerate_support(expand))


class Bernoulli(ExponentialFamily):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    def __init__(self, probs=None, logits=None, validate_args=None):
        _probs_or_logits(self, "Bernoulli", probs, logits, validate_args)

    def __getattr__(self, name):
        return _derived(self, name, True)

    param_shape = property(lambda self: self._param.shape)

    @property
    def mean(self):
        return self.probs

    _natural_params = property(lambda self: (_ops.logit(self.probs),))

    def _log_normalizer(self, x):
        return _ops.log1p(_ops.exp(x))

    @property
    def mode(self):
        m = _ops.cast(self.probs >= 0.5, self.probs.dtype)
        return _ops.where(self.probs == 0.5, float("nan"), m)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        p = self.probs.detach().expand(tuple(shape))
        u = _ops.rand(*shape, dtype=p.dtype, device=p.device)
        return _ops.cast(u < p, p.dtype)

    def log_prob(self, value):
        self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_ops.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return _ops.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        values = _ops.arange(2, dtype=self._param.dtype).reshape((-1,) + (1,) * len(self.batch_shape))
        if expand:
            values = values.expand((2,) + tuple(self.batch_shape))
        return values


@register_kl(Categorical, Categorical)
def _kl_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = _ops.where(q.probs == 0, float("inf"), t)
    t = _ops.where(p.probs == 0, 0.0, t)
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot(p, q):
    return _kl_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli(p, q):
    sp = _ops.softplus
    t1 = p.probs * (sp(-q.logits) - sp(-p.logits))
    t2 = (1 - p.probs) * (sp(q.logits) - sp(p.logits))
    return t1 + t2
