"""`Distribution`: the base of tracejit's probability distributions, with PyTorch's
interface (``batch_shape``, ``event_shape``, ``sample``, ``rsample``, ``log_prob``,
``entropy``, ``mean``, ``variance``, argument validation) and the KL-divergence registry.

Parameters are tensors broadcast together (``broadcast_all``); every method is written
with tracejit ops, so ``log_prob``, ``entropy`` and ``rsample`` carry gradients to the
parameters. Random draws come from tracejit's global generator (``tracejit.manual_seed``).
"""
from __future__ import annotations

from .. import dtypes as _dt
from ..ops.eager import bind, trace_state
from ..tensor import Tensor
from . import constraints

__all__ = ["Distribution", "broadcast_all", "kl_divergence", "register_kl"]

_VALIDATE = [True]


def broadcast_all(*values):
    """Tensors of the values (numbers become tensors of the default float dtype), broadcast."""
    from ..ops import broadcast_to, tensor
    from ..shapes import broadcast_shapes
    ref = next((v for v in values if isinstance(v, Tensor)), None)
    dtype = ref.dtype if ref is not None and ref.dtype.is_floating_point else _dt.get_default_dtype()
    ts = [v if isinstance(v, Tensor) else tensor(float(v), dtype=dtype) for v in values]
    shape = tuple(broadcast_shapes("broadcast_all", *[tuple(t.shape) for t in ts]))
    return tuple(t if tuple(t.shape) == shape else broadcast_to(t, shape) for t in ts)


def _require(constraint, value: Tensor, message) -> None:
    """ValueError(message(value's type name, its values shown)) unless `constraint` holds
    for every element of `value`. In a capture, a check the compiled program makes on
    every call, where a Python ``if`` on the values would end the capture."""
    if trace_state.tracer is None:
        if not constraint.holds(value):
            raise ValueError(message(type(value).__name__, f":\n{value}"))
        return
    from ..ops.value_checks_prim import CHECK
    from ..ops import logical_not
    bind(CHECK, logical_not(constraint.check(value).all()), exc_type=ValueError, message=message("Tensor", ""),
         where="")


class Distribution:
    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict = {}
    support = None

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        from ..size import Size
        self._batch_shape, self._event_shape = Size(tuple(batch_shape)), Size(tuple(event_shape))
        self._validate_args = _VALIDATE[0] if validate_args is None else bool(validate_args)
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                value = self.__dict__.get(name)     # only the parameters given (probs or logits)
                if not isinstance(value, Tensor):
                    continue
                _require(constraint, value, lambda kind, shown: (
                    f"Expected parameter {name} ({kind} of shape {tuple(value.shape)}) of distribution "
                    f"{self!r} to satisfy the constraint {constraint!r}, but found invalid values{shown}"))

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        _VALIDATE[0] = bool(value)

    def _broadcast(self, validate_args, **params) -> None:
        """Set `params` as attributes, broadcast together (`broadcast_all`); the batch
        shape is theirs, the event shape ()."""
        values = broadcast_all(*params.values())
        self.__dict__.update(zip(params, values))
        Distribution.__init__(self, tuple(values[0].shape), validate_args=validate_args)

    def _uniform(self, sample_shape, like: Tensor) -> Tensor:
        """Uniform [0, 1) draws of the sample's shape, in `like`'s dtype."""
        from ..ops import rand
        return rand(*self._extended_shape(sample_shape), dtype=like.dtype)

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    def _extended_shape(self, sample_shape=()):
        from ..size import Size
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def sample(self, sample_shape=()):
        from ..autograd.grad_mode import no_grad
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} does not have a reparameterized sample "
                                  f"(rsample); use sample()")

    def sample_n(self, n: int):
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError(f"{type(self).__name__}.log_prob is not implemented")

    def entropy(self):
        raise NotImplementedError(f"{type(self).__name__}.entropy is not implemented")

    def cdf(self, value):
        raise NotImplementedError(f"{type(self).__name__}.cdf is not implemented")

    def icdf(self, value):
        raise NotImplementedError(f"{type(self).__name__}.icdf is not implemented")

    def perplexity(self):
        from ..ops import exp
        return exp(self.entropy())

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__}.mean is not implemented")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self).__name__}.mode is not implemented")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__}.variance is not implemented")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def expand(self, batch_shape, _instance=None):
        """This distribution with its batch shape broadcast to `batch_shape`: the parameters
        (and the distributions it is built on) expanded, no data copied."""
        from ..size import Size
        batch_shape = tuple(batch_shape)
        nb = len(self._batch_shape)
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new.__dict__.update(self.__dict__)
        names = list(self.arg_constraints) if isinstance(self.arg_constraints, dict) else []
        for name in names + ["_param"]:
            v = self.__dict__.get(name)
            if isinstance(v, Tensor) and v.ndim >= nb:
                new.__dict__[name] = v.expand(batch_shape + tuple(v.shape[nb:]))
        for name, v in self.__dict__.items():
            if isinstance(v, Distribution):
                new.__dict__[name] = v.expand(batch_shape + tuple(v.batch_shape[nb:]))
        new._batch_shape = Size(batch_shape)
        return new

    def enumerate_support(self, expand: bool = True):
        raise NotImplementedError(f"{type(self).__name__} has no enumerable support")

    def _validate_sample(self, value) -> None:
        if not self._validate_args or self.support is None:
            return
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        _require(self.support, value, lambda kind, shown: (
            f"Expected value argument ({kind} of shape {tuple(value.shape)}) to be within the support "
            f"({self.support!r}) of the distribution {self!r}, but found invalid values{shown}"))

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(f"{k}: {tuple(self.__dict__[k].shape) if self.__dict__[k].numel() > 1 else self.__dict__[k]}"
                         for k in names)
        return f"{type(self).__name__}({args})"


# ---------------------------------------------------------------- KL divergence
_KL: dict = {}


def register_kl(type_p, type_q):
    """Decorator: ``@register_kl(Normal, Normal) def kl(p, q): ...``."""
    def deco(fn):
        _KL[(type_p, type_q)] = fn
        return fn
    return deco


def kl_divergence(p: Distribution, q: Distribution):
    """KL(p || q) for a registered pair of distribution types (the most specific match)."""
    best = None
    for (tp, tq), fn in _KL.items():
        if isinstance(p, tp) and isinstance(q, tq):
            rank = (type(p).__mro__.index(tp), type(q).__mro__.index(tq))
            if best is None or rank < best[0]:
                best = (rank, fn)
    if best is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p = {type(p).__name__} and "
                                  f"q = {type(q).__name__}")
    return best[1](p, q)


class LocScale(Distribution):
    """The base of the reparameterized location-scale families (Normal, Laplace, Cauchy,
    Gumbel, LogNormal): two parameters broadcast together, the batch shape theirs."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self._broadcast(validate_args, loc=loc, scale=scale)


def inf_like(t: Tensor) -> Tensor:
    """+inf of `t`'s shape and dtype, outside the graph (an infinite KL divergence)."""
    from ..ops import full_like
    return full_like(t.detach(), float("inf"))
