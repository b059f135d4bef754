"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's formulas)."""
from __future__ import annotations

from .optimizer import Optimizer, _check_number, _new_state_tensor

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""PyTorch's SGD, per parameter with gradient g:

    g = g + weight_decay * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
    g = g + momentum * b (nesterov) or b;  p = p - lr * g.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize))

    def _validate(self, group: dict) -> None:
        _check_number("SGD", "learning rate lr", group["lr"])
        _check_number("SGD", "momentum", group["momentum"])
        _check_number("SGD", "dampening", group["dampening"], low=None)
        _check_number("SGD", "weight_decay", group["weight_decay"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0 and zero dampening")

    def _update(self, p, grad, state, group) -> None:
        lr, momentum = group["lr"], group["momentum"]
        wd, dampening = group["weight_decay"], group["dampening"]
        if group["maximize"]:
            grad = -grad
        if wd != 0:
            grad = grad + wd * p._data
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = _new_state_tensor(p, grad.copy())
            else:
                b = buf._data
                b *= momentum
                b += (1 - dampening) * grad
                buf._vbox[0] += 1
            grad = grad + momentum * buf._data if group["nesterov"] else buf._data
        p._data -= lr * grad
