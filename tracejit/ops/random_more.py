"""More random draws with PyTorch's signatures: ``normal`` (every overload), ``poisson``,
``binomial``, ``randint_like`` and ``bernoulli`` with an explicit probability.

``normal`` is an affine map of ``randn``, so it records a fresh draw per call inside a
compiled function, and its gradient reaches ``mean`` and ``std`` (as PyTorch's
reparameterized form does). ``poisson`` and ``binomial`` draw from the same global
generator (or ``generator=``) eagerly; their counts have no gradient.
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import dtypes as _dt
from ..shapes import broadcast_shapes
from ..tensor import Tensor
from .creation import _size, like, tensor
from .random import drawing_from, randint, randn
from .registry import refuse_tracing
from ..errors import ArgumentError

__all__ = ["normal", "poisson", "binomial", "randint_like"]


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad: bool = False, out=None):
    """Draws from N(mean, std**2): tensor mean and/or std broadcast together, or two numbers
    and a `size`."""
    if out is not None:
        raise TypeError("normal: out= is not supported; assign the result instead")
    if generator is not None:
        with drawing_from(generator, "normal"):
            return normal(mean, std, size, dtype=dtype, device=device, requires_grad=requires_grad)
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not tm and not ts:
        if size is None:
            raise TypeError("normal: with a number mean and std, give size (e.g. normal(0.0, 1.0, (3,)))")
        if std < 0:
            raise ArgumentError(f"normal: std must be >= 0, got {std}")
        t = randn(*_size((size,) if isinstance(size, int) else tuple(size)), dtype=dtype, device=device)
        out_ = t * std + mean if (std != 1.0 or mean != 0.0) else t
        return out_.requires_grad_(requires_grad) if requires_grad else out_
    if size is not None:
        raise TypeError("normal: size is only for a number mean and std; the tensors' shapes give it")
    if ts and not std.dtype.is_floating_point or tm and not mean.dtype.is_floating_point:
        raise TypeError("normal: mean and std tensors must be floating point")
    if ts and bool((std.detach() < 0).any()):
        raise ValueError("normal: std must be >= 0 everywhere")
    shape = broadcast_shapes("normal", tuple(mean.shape) if tm else (), tuple(std.shape) if ts else ())
    ref = mean if tm else std
    z = randn(*shape, dtype=ref.dtype, device=ref.device)
    return z * std + mean


def _counts(draw, op, generator):
    refuse_tracing(op, "its inputs")
    with drawing_from(generator, op):
        from .random import global_rng
        return draw(global_rng())


def poisson(input, generator=None):
    """Counts drawn from Poisson(rate) for each rate in `input` (same dtype as `input`)."""
    if not isinstance(input, Tensor) or not input.dtype.is_floating_point:
        raise TypeError("poisson: expected a floating point tensor of rates")
    rates = input.detach().numpy()
    if (rates < 0).any() or np.isnan(rates).any():
        raise ValueError("poisson: rates must be non-negative")
    drawn = _counts(lambda g: g.poisson(rates), "poisson", generator)
    return tensor(np.asarray(drawn, input.dtype.np), device=input.device)


def binomial(count, prob, generator=None):
    """Successes out of `count` trials with probability `prob`, elementwise (broadcast)."""
    if not isinstance(count, Tensor) or not isinstance(prob, Tensor):
        raise TypeError("binomial: count and prob must be tensors")
    if not count.dtype.is_floating_point:
        raise ValueError(f"binomial: count must be a floating point tensor, got {count.dtype.name}")
    n, p = np.broadcast_arrays(count.detach().numpy(), prob.detach().numpy())
    if np.isnan(n).any() or np.isnan(p).any():
        raise ValueError("binomial: count and prob must not be nan")
    # As PyTorch's sampler: whole trials of a fractional count (its floor), none for a
    # count or prob <= 0, the count itself for a prob >= 1, and for a prob > 0.5 the
    # count less the failures (so a fractional count keeps its fraction).
    inner = (n > 0) & (p > 0) & (p < 1)
    trials = np.where(inner, np.floor(n), 0).astype(np.int64)
    flip = p > 0.5
    drawn = _counts(lambda g: g.binomial(trials, np.where(inner, np.where(flip, 1 - p, p), 0.5)), "binomial",
                    generator)
    drawn = np.where(inner, np.where(flip, n - drawn, drawn), np.where((n > 0) & (p >= 1), n, 0))
    dt = _dt.promote_types(count.dtype, prob.dtype)
    return tensor(np.asarray(drawn, dt.np), device=count.device)


def randint_like(input, low=0, high=None, *, dtype=None, device=None, generator=None,
                 requires_grad: bool = False, memory_format=None, layout=None, pin_memory: bool = False):
    """Integers in [low, high) of input's shape (``randint_like(x, high)`` or
    ``randint_like(x, low, high)``), in input's dtype unless given."""
    if high is None:
        low, high = 0, low
    for name, v in (("low", low), ("high", high)):
        if not isinstance(v, numbers.Integral):
            raise TypeError(f"randint_like: {name} must be an int, got {v!r}")
    kw = dict(generator=generator, dtype=dtype or input.dtype, device=device or input.device)
    return like(input, lambda shape: randint(int(low), int(high), shape, **kw), memory_format, layout,
                "randint_like", requires_grad)
