"""Adam and AdamW, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g at step t (``lerp`` and the operation order are
PyTorch's, so float32 results agree with it to rounding):

    g = g + weight_decay * p            (Adam)   |   p = p * (1 - lr * weight_decay)   (AdamW)
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    v_hat = max(v_hat, v) if amsgrad else v
    p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
"""
from __future__ import annotations

import math

from .optimizer import Optimizer, _check_number, _new_state_tensor

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _validate(self, group: dict) -> None:
        name = type(self).__name__
        _check_number(name, "learning rate lr", group["lr"])
        _check_number(name, "epsilon eps", group["eps"])
        _check_number(name, "weight_decay", group["weight_decay"])
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        group["betas"] = tuple(betas)
        _check_number(name, "beta parameter at index 0", betas[0], 0.0, 1.0, high_open=True)
        _check_number(name, "beta parameter at index 1", betas[1], 0.0, 1.0, high_open=True)

    def _update(self, p, grad, state, group) -> None:
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        xp = p._xp()
        if not state:
            state["step"] = 0
            state["exp_avg"] = _new_state_tensor(p, xp.zeros_like(p._data))
            state["exp_avg_sq"] = _new_state_tensor(p, xp.zeros_like(p._data))
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = _new_state_tensor(p, xp.zeros_like(p._data))
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        step = state["step"]
        if wd != 0:
            if self._decoupled:
                p._data *= 1 - lr * wd
            else:
                grad = grad + wd * p._data
        m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
        _lerp_(m, grad, 1 - beta1)
        v *= beta2
        v += (1 - beta2) * grad * grad
        state["exp_avg"]._vbox[0] += 1
        state["exp_avg_sq"]._vbox[0] += 1
        step_size = lr / (1 - beta1 ** step)
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            if vmax is None:  # amsgrad switched on after some steps
                vmax = state["max_exp_avg_sq"] = _new_state_tensor(p, xp.zeros_like(p._data))
            xp.maximum(vmax._data, v, out=vmax._data)
            vmax._vbox[0] += 1
            v = vmax._data
        denom = xp.sqrt(v)
        denom /= bias_correction2_sqrt
        denom += eps
        upd = -step_size * m
        upd /= denom
        p._data += upd


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01): p *= 1 - lr * weight_decay before the step."""

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


def _lerp_(a, b, w: float) -> None:
    """a = a + w * (b - a) in place, with PyTorch's two-sided formula for accuracy near w = 1."""
    if abs(w) < 0.5:
        a += w * (b - a)
    else:
        a[...] = b - (b - a) * (1 - w)
