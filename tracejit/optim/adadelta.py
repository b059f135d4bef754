"""Adadelta, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g:

    g = g + weight_decay * p
    v = rho * v + (1 - rho) * g * g
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u = rho * u + (1 - rho) * delta * delta
    p = p - lr * delta
"""
from __future__ import annotations

from .optimizer import Optimizer, _bump, _check_number, _count_step, _direction

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    _numbers = ("learning rate lr", "epsilon eps", "weight_decay")

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, *, maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, **self._impl_options(foreach, capturable, differentiable)))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        _check_number("Adadelta", "rho value", group["rho"], 0.0, 1.0)

    def _update(self, p, grad, state, group) -> None:
        rho, eps = group["rho"], group["eps"]
        xp = p._xp()
        _count_step(state, p, "square_avg", "acc_delta")
        grad = _direction(grad, p, group)
        v, u = state["square_avg"]._data, state["acc_delta"]._data
        v *= rho
        v += (1 - rho) * (grad * grad)
        delta = xp.sqrt(u + eps) / xp.sqrt(v + eps) * grad
        u *= rho
        u += (1 - rho) * (delta * delta)
        _bump(state["square_avg"], state["acc_delta"])
        p._data -= group["lr"] * delta
