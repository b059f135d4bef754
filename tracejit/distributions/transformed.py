"""``TransformedDistribution`` (a base distribution pushed through transforms) and
``MixtureSameFamily`` (a categorical mixture of one batched component distribution),
with PyTorch's parameterizations and log-density arithmetic."""
from __future__ import annotations

from .. import ops as _ops
from .discrete import Categorical
from .distribution import Distribution, kl_divergence, register_kl
from .transforms import Transform, _sum_rightmost

__all__ = ["TransformedDistribution", "MixtureSameFamily"]


class TransformedDistribution(Distribution):
    """``y = t_k(...t_1(x))`` with ``x ~ base_distribution``; ``log_prob(y)`` subtracts each
    transform's log-determinant at the values it saw."""

    def __init__(self, base_distribution: Distribution, transforms, validate_args=None) -> None:
        if isinstance(transforms, Transform):
            transforms = [transforms]
        if not isinstance(transforms, (list, tuple)) or not all(isinstance(t, Transform) for t in transforms):
            raise ValueError(f"TransformedDistribution: transforms must be a Transform or a list of "
                             f"them, got {transforms!r}")
        self.base_dist, self.transforms = base_distribution, list(transforms)
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        event_dim = max([len(base_distribution.event_shape)] + [t.event_dim for t in self.transforms])
        for t in self.transforms:
            shape = t.forward_shape(shape)
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=False)

    has_rsample = property(lambda self: self.base_dist.has_rsample)

    @property
    def support(self):
        return self.transforms[-1].codomain if self.transforms else self.base_dist.support

    def _forward(self, x):
        for t in self.transforms:
            x = t(x)
        return x

    def sample(self, sample_shape=()):
        from ..autograd.grad_mode import no_grad
        with no_grad():
            return self._forward(self.base_dist.sample(sample_shape))

    def rsample(self, sample_shape=()):
        return self._forward(self.base_dist.rsample(sample_shape))

    def log_prob(self, value):
        event_dim = len(self.event_shape)
        lp = 0.0
        y = value
        for t in reversed(self.transforms):
            x = t.inv(y)
            lp = lp - _sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            y = x
        return lp + _sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))

    def cdf(self, value):
        for t in reversed(self.transforms):
            value = t.inv(value)
        return self.base_dist.cdf(value)

    def icdf(self, value):
        return self._forward(self.base_dist.icdf(value))


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed(p, q):
    """KL of the bases: one bijection applied to both keeps the divergence (as PyTorch, only
    for equal transforms and event shapes)."""
    if (len(p.transforms) != len(q.transforms) or p.event_shape != q.event_shape
            or not all(map(_same, p.transforms, q.transforms))):
        raise NotImplementedError("KL(TransformedDistribution || TransformedDistribution) needs the same "
                                  "transforms and event shape")
    return kl_divergence(p.base_dist, q.base_dist)


def _same(a, b) -> bool:
    """Whether two transforms (or their parameters) are equal: one type, equal parameters."""
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, Transform):
        va, vb = ({k: v for k, v in vars(t).items() if k != "_cached"} for t in (a, b))
        return type(a) is type(b) and va.keys() == vb.keys() and all(_same(va[k], vb[k]) for k in va)
    if hasattr(a, "shape") and hasattr(b, "shape"):
        return tuple(a.shape) == tuple(b.shape) and bool((a == b).all())
    return not hasattr(a, "shape") and not hasattr(b, "shape") and a == b


class MixtureSameFamily(Distribution):
    """A mixture whose weights are `mixture_distribution` (a Categorical over the rightmost
    batch dim of `component_distribution`) and whose components share one family."""
    has_rsample = False

    def __init__(self, mixture_distribution: Categorical, component_distribution: Distribution,
                 validate_args=None) -> None:
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError("MixtureSameFamily: mixture_distribution must be a Categorical, got "
                             f"{type(mixture_distribution).__name__}")
        if not isinstance(component_distribution, Distribution):
            raise ValueError("MixtureSameFamily: component_distribution must be a Distribution, got "
                             f"{type(component_distribution).__name__}")
        cb = tuple(component_distribution.batch_shape)
        mb = tuple(mixture_distribution.batch_shape)
        k = mixture_distribution.logits.shape[-1]
        if not cb or cb[-1] != k:
            raise ValueError(f"MixtureSameFamily: the mixture has {k} components but the component "
                             f"distribution's rightmost batch dim is {cb[-1] if cb else None}")
        if len(mb) > len(cb) - 1 or any(m not in (1, c) for m, c in zip(mb[::-1], cb[-2::-1])):
            raise ValueError(f"MixtureSameFamily: mixture batch shape {mb} does not match the component "
                             f"batch shape {cb[:-1]}")
        self._mixture, self._component = mixture_distribution, component_distribution
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(cb[:-1], tuple(component_distribution.event_shape), validate_args=False)

    mixture_distribution = property(lambda self: self._mixture)
    component_distribution = property(lambda self: self._component)
    support = property(lambda self: self._component.support)

    def _pad(self, x):
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture(self, p):
        for _ in range(self._event_ndims):
            p = p.unsqueeze(-1)
        return p

    @property
    def mean(self):
        probs = self._pad_mixture(self._mixture.probs)
        return (probs * self._component.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self):
        probs = self._pad_mixture(self._mixture.probs)
        d = -1 - self._event_ndims
        mean_cond_var = (probs * self._component.variance).sum(d)
        var_cond_mean = (probs * (self._component.mean - self._pad(self.mean)) ** 2).sum(d)
        return mean_cond_var + var_cond_mean

    def log_prob(self, x):
        lp = self._component.log_prob(self._pad(x))
        mix = _ops.log_softmax(self._mixture.logits, -1)
        return _ops.logsumexp(lp + mix, -1)

    def cdf(self, x):
        cdf_x = self._component.cdf(self._pad(x))
        return (cdf_x * self._mixture.probs).sum(-1)

    def sample(self, sample_shape=()):
        from ..autograd.grad_mode import no_grad
        with no_grad():
            n = len(tuple(sample_shape))
            idx = self._mixture.sample(sample_shape)             # sample + mixture batch
            comps = self._component.sample(sample_shape)         # sample + batch + (k,) + event
            es = tuple(self.event_shape)
            idx = idx.reshape(tuple(idx.shape) + (1,) * (len(es) + 1))
            idx = idx.expand(tuple(comps.shape[:n + len(self.batch_shape)]) + (1,) + es)
            return _ops.gather(comps, n + len(self.batch_shape), idx).squeeze(n + len(self.batch_shape))
