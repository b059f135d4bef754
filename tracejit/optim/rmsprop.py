"""RMSprop, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g (PyTorch's operation order, so results agree to rounding):

    g = g + weight_decay * p
    v = alpha * v + (1 - alpha) * g * g
    centered:  m = lerp(m, g, 1 - alpha);  avg = sqrt(v - m * m) + eps   else  avg = sqrt(v) + eps
    momentum > 0:  b = momentum * b + g / avg;  p = p - lr * b     else  p = p - lr * g / avg
"""
from __future__ import annotations

from .optimizer import Optimizer, _bump, _count_step, _direction, _zeros

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    _numbers = ("learning rate lr", "epsilon eps", "momentum", "weight_decay", "alpha")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _update(self, p, grad, state, group) -> None:
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        momentum = group["momentum"]
        xp = p._xp()
        _count_step(state, p, "square_avg")
        if momentum > 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = _zeros(p)
        if group["centered"] and "grad_avg" not in state:
            state["grad_avg"] = _zeros(p)
        grad = _direction(grad, p, group)
        v = state["square_avg"]._data
        v *= alpha
        v += (1 - alpha) * (grad * grad)
        _bump(state["square_avg"])
        if group["centered"]:
            m = state["grad_avg"]._data
            m += (1 - alpha) * (grad - m)          # lerp(m, g, 1 - alpha)
            _bump(state["grad_avg"])
            avg = xp.sqrt(v - m * m)
        else:
            avg = xp.sqrt(v)
        avg += eps
        if momentum > 0:
            b = state["momentum_buffer"]._data
            b *= momentum
            b += grad / avg
            _bump(state["momentum_buffer"])
            p._data -= lr * b
        else:
            p._data -= lr * (grad / avg)
