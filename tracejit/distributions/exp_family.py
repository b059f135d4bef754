"""`ExponentialFamily`: distributions with density exp(<t(x), theta> - F(theta) + k(x)),
described by their natural parameters theta (``_natural_params``), the log-normalizer F
(``_log_normalizer``) and the carrier measure's mean E[k(x)] (``_mean_carrier_measure``).

Their entropy and the KL divergence between two members of one family follow from F alone
(Bregman divergences, as PyTorch computes them): H = F(theta) - <theta, grad F(theta)> -
E[k], KL(p || q) = F(theta_q) - F(theta_p) - <theta_q - theta_p, grad F(theta_p)>. The
gradient of F is taken with create_graph, so both stay differentiable in the parameters
(where PyTorch's are cut off from them).
"""
from __future__ import annotations

from .distribution import Distribution, register_kl
from .transforms import _sum_rightmost

__all__ = ["ExponentialFamily"]


def _flat_sum(x, batch_shape):
    return x.reshape(tuple(batch_shape) + (-1,)).sum(-1)


def _grad_of_normalizer(d, nparams):
    """(the parameters, F at them, grad F with its graph). Parameters that carry gradients
    stay in the graph (PyTorch detaches them), so entropy and KL reach the distribution's
    parameters; the values are the same."""
    from ..autograd import grad
    leaves = [p if p.requires_grad else p.detach().requires_grad_() for p in nparams]
    lg = d._log_normalizer(*leaves)
    return leaves, lg, grad(lg.sum(), leaves, create_graph=True)


class ExponentialFamily(Distribution):
    @property
    def _natural_params(self):
        raise NotImplementedError(f"{type(self).__name__} does not give its natural parameters")

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError(f"{type(self).__name__} does not give its log-normalizer")

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError(f"{type(self).__name__} does not give its carrier measure's mean")

    def entropy(self):
        result = -self._mean_carrier_measure
        leaves, lg, grads = _grad_of_normalizer(self, self._natural_params)
        result = result + lg
        for p, g in zip(leaves, grads):
            result = result - _flat_sum(p * g, self._batch_shape)
        return result


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential families cannot "
                                  "be computed using Bregman divergences")
    leaves, lg, grads = _grad_of_normalizer(p, p._natural_params)
    q_params = q._natural_params
    result = q._log_normalizer(*q_params) - lg
    nb = len(result.shape)
    for pp, qp, g in zip(leaves, q_params, grads):
        term = (qp - pp) * g
        # each parameter's own event dims (PyTorch sums len(event_shape) dims of every
        # parameter, which mixes the batch of a scalar parameter such as Wishart's df)
        result = result - _sum_rightmost(term, term.ndim - nb)
    return result
