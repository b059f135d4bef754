"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's formulas).

``fused`` (PyTorch's argument, as for Adam): a group's CPU float parameters update in one
numba kernel launch (`Optimizer._update_group`), one pass over every p, g (and momentum
buffer), bitwise the array path's results. ``None`` (default): fused under Adam's rule
(``FUSED_MIN`` elements, numba loaded, compilation on); ``True``: always (CPU only);
``False``: never.
"""
from __future__ import annotations

from .optimizer import Optimizer, _check_fused, _direction, _zeros

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""PyTorch's SGD, per parameter with gradient g:

    g = g + weight_decay * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b (nesterov) or b;  p = p - lr * g.
    """

    _numbers = ("learning rate lr", "momentum", ("dampening", None), "weight_decay")
    # SGD's update moves 12 bytes per float32 element and computes next to nothing: below
    # this many elements one thread is faster than a two-share launch.
    _parallel_min = 1 << 22

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      fused=fused, **self._impl_options(foreach, None, differentiable)))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0 and zero dampening")
        _check_fused("SGD", group)

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        momentum = group["momentum"]
        first = momentum != 0 and state.get("momentum_buffer") is None
        if first:
            state["momentum_buffer"] = _zeros(p)
        flags = (bool(group["maximize"]), group["weight_decay"] != 0, momentum != 0, bool(group["nesterov"]), first)
        return flags, [state["momentum_buffer"]] if momentum != 0 else [], \
            (group["weight_decay"], momentum, 1 - group["dampening"], group["lr"])

    @staticmethod
    def _form(maximize: bool, decay: bool, momentum: bool, nesterov: bool, first: bool):
        def sgd(xp, p, g, *rest):
            if momentum:
                buf, *rest = rest
            wd, mom, one_minus_dampening, lr = rest
            g = _direction(g, p, maximize, decay, wd)
            if momentum:
                buf = g if first else buf * mom + one_minus_dampening * g
                g = g + mom * buf if nesterov else buf
            p = p - lr * g
            return (p, buf) if momentum else (p,)
        return sgd
