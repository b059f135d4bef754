"""RMSprop, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g (PyTorch's operation order, so results agree to rounding):

    g = g + weight_decay * p
    v = alpha * v + (1 - alpha) * g * g
    centered:  m = lerp(m, g, 1 - alpha);  avg = sqrt(v - m * m) + eps   else  avg = sqrt(v) + eps
    momentum > 0:  b = momentum * b + g / avg;  p = p - lr * b     else  p = p - lr * g / avg
"""
from __future__ import annotations

from .optimizer import Optimizer, _count_step, _direction, _zeros

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

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        _count_step(state, p, "square_avg")
        momentum, centered = group["momentum"] > 0, bool(group["centered"])
        if momentum and "momentum_buffer" not in state:
            state["momentum_buffer"] = _zeros(p)
        if centered and "grad_avg" not in state:
            state["grad_avg"] = _zeros(p)
        tensors = [state[k] for k, on in (("square_avg", True), ("grad_avg", centered),
                                          ("momentum_buffer", momentum)) if on]
        alpha = group["alpha"]
        return ((bool(group["maximize"]), group["weight_decay"] != 0, centered, momentum), tensors,
                (group["weight_decay"], alpha, 1 - alpha, group["eps"], group["momentum"], group["lr"]))

    @staticmethod
    def _form(maximize: bool, decay: bool, centered: bool, momentum: bool):
        def rmsprop(xp, p, g, v, *rest):
            m = b = None
            if centered:
                m, *rest = rest
            if momentum:
                b, *rest = rest
            wd, alpha, one_minus_alpha, eps, mom, lr = rest
            g = _direction(g, p, maximize, decay, wd)
            v = v * alpha + one_minus_alpha * (g * g)
            if centered:
                m = m + one_minus_alpha * (g - m)          # lerp(m, g, 1 - alpha)
                avg = xp.sqrt(v - m * m) + eps
            else:
                avg = xp.sqrt(v) + eps
            if momentum:
                b = b * mom + g / avg
                p = p - lr * b
            else:
                p = p - lr * (g / avg)
            return (p, v) + (m,) * centered + (b,) * momentum
        return rmsprop
