"""Adadelta, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g:

    g = g + weight_decay * p
    v = rho * v + (1 - rho) * g * g
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u = rho * u + (1 - rho) * delta * delta
    p = p - lr * delta
"""
from __future__ import annotations

from .optimizer import Optimizer, _check_number, _direction, _new_state_tensor

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, *, maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, **self._impl_options(foreach, capturable, differentiable)))

    def _validate(self, group: dict) -> None:
        _check_number("Adadelta", "learning rate lr", group["lr"])
        _check_number("Adadelta", "rho value", group["rho"], 0.0, 1.0)
        _check_number("Adadelta", "epsilon eps", group["eps"])
        _check_number("Adadelta", "weight_decay", group["weight_decay"])

    def _update(self, p, grad, state, group) -> None:
        rho, eps = group["rho"], group["eps"]
        xp = p._xp()
        if not state:
            state["step"] = 0
            state["square_avg"] = _new_state_tensor(p, xp.zeros_like(p._data))
            state["acc_delta"] = _new_state_tensor(p, xp.zeros_like(p._data))
        state["step"] += 1
        grad = _direction(grad, p, group)
        v, u = state["square_avg"]._data, state["acc_delta"]._data
        v *= rho
        v += (1 - rho) * (grad * grad)
        delta = xp.sqrt(u + eps) / xp.sqrt(v + eps) * grad
        u *= rho
        u += (1 - rho) * (delta * delta)
        state["square_avg"]._vbox[0] += 1
        state["acc_delta"]._vbox[0] += 1
        p._data -= group["lr"] * delta
