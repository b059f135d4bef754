"""Adam and AdamW, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g at step t (``lerp`` and the operation order are
PyTorch's, so float32 results agree with it to rounding):

    g = g + weight_decay * p  (Adam)  |  p = p * (1 - lr * weight_decay)  (AdamW, decoupled_weight_decay)
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    v_hat = max(v_hat, v) if amsgrad else v
    p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)

``fused`` (PyTorch's argument): the update of a group's CPU float parameters can run as
one numba kernel, one pass over every p, g, m and v instead of eleven array operations
per parameter (`Optimizer._update_group`), bitwise the array path's results. ``None``
(default): fused when the eligible parameters hold at least ``FUSED_MIN`` elements
together, once numba is loaded in the process (an eager script never pays numba's
start-up) and unless compilation is off. ``True``: fused for every parameter (CPU only).
``False``: never.
"""
from __future__ import annotations

import math

from .optimizer import FUSED_MIN, Optimizer, _check_betas, _check_fused, _count_step, _direction, _zeros

__all__ = ["Adam", "AdamW", "FUSED_MIN"]


class Adam(Optimizer):
    _numbers = ("learning rate lr", "epsilon eps", "weight_decay")

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, fused=fused,
                                      **self._impl_options(foreach, capturable, differentiable),
                                      decoupled_weight_decay=decoupled_weight_decay))

    def _validate(self, group: dict) -> None:
        name = type(self).__name__
        super()._validate(group)
        _check_betas(name, group)
        _check_fused(name, group)

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        step = _count_step(state, p, "exp_avg", "exp_avg_sq")
        beta1, beta2 = group["betas"]
        lr, wd, w = group["lr"], group["weight_decay"], 1 - beta1
        decay = group["decoupled_weight_decay"] and wd != 0
        moments = [state["exp_avg"], state["exp_avg_sq"]]
        if group["amsgrad"]:
            if state.get("max_exp_avg_sq") is None:  # also: switched on after some steps
                state["max_exp_avg_sq"] = _zeros(p)
            moments.append(state["max_exp_avg_sq"])
        flags = (bool(group["maximize"]), decay, not group["decoupled_weight_decay"] and wd != 0,
                 abs(w) < 0.5, bool(group["amsgrad"]))
        return flags, moments, (1 - lr * wd if decay else wd, w if flags[3] else 1 - w, beta2, 1 - beta2,
                                math.sqrt(1 - beta2 ** step), group["eps"], -(lr / (1 - beta1 ** step)))

    @staticmethod
    def _form(maximize: bool, decay: bool, coupled: bool, small: bool, amsgrad: bool):
        def adam(xp, p, g, m, v, *rest):
            if amsgrad:
                vmax, *rest = rest
            wd, w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size = rest
            g = _direction(g, p, maximize, coupled, wd)
            if decay:
                p = p * wd
            # lerp(m, g, 1 - beta1), PyTorch's two-sided form (accurate near 1 - beta1 = 1)
            m = m + (g - m) * w if small else g - (g - m) * w
            v = v * beta2 + g * one_minus_beta2 * g
            if amsgrad:
                vmax = xp.maximum(vmax, v)
            p = p + m * neg_step_size / (xp.sqrt(vmax if amsgrad else v) / bc2_sqrt + eps)
            return (p, m, v, vmax) if amsgrad else (p, m, v)
        return adam


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01): p *= 1 - lr * weight_decay before the step."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
