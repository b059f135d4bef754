"""Adadelta, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g:

    g = g + weight_decay * p
    v = rho * v + (1 - rho) * g * g
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u = rho * u + (1 - rho) * delta * delta
    p = p - lr * delta
"""
from __future__ import annotations

from .optimizer import Optimizer, _check_number, _count_step, _direction

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

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        _count_step(state, p, "square_avg", "acc_delta")
        rho = group["rho"]
        return ((bool(group["maximize"]), group["weight_decay"] != 0), [state["square_avg"], state["acc_delta"]],
                (group["weight_decay"], rho, 1 - rho, group["eps"], group["lr"]))

    @staticmethod
    def _form(maximize: bool, decay: bool):
        def adadelta(xp, p, g, v, u, wd, rho, one_minus_rho, eps, lr):
            g = _direction(g, p, maximize, decay, wd)
            v = v * rho + one_minus_rho * (g * g)
            delta = xp.sqrt(u + eps) / xp.sqrt(v + eps) * g
            u = u * rho + one_minus_rho * (delta * delta)
            return p - lr * delta, v, u
        return adadelta
