"""Adagrad, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g at step t:

    g = g + weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay)
    s = s + g * g;  p = p - clr * g / (sqrt(s) + eps)

The accumulator ``sum`` starts at ``initial_accumulator_value`` and, as in PyTorch, is
created with the optimizer (so it is in ``state_dict()`` before the first step).
"""
from __future__ import annotations

from .optimizer import Optimizer, _direction, _new_state_tensor

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    _numbers = ("learning rate lr", "lr_decay", "weight_decay", "initial_accumulator_value", "epsilon eps")

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize, fused=fused,
                                      **self._impl_options(foreach, False, differentiable)))
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, self.state[p], group)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._init_state(p, self.state[p], group)

    @staticmethod
    def _init_state(p, state, group) -> None:
        if not state:
            xp = p._xp()
            state["step"] = 0
            state["sum"] = _new_state_tensor(p, xp.full_like(p._data, group["initial_accumulator_value"]))

    def _update(self, p, grad, state, group) -> None:
        self._init_state(p, state, group)
        xp = p._xp()
        state["step"] += 1
        grad = _direction(grad, p, group)
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        s = state["sum"]._data
        s += grad * grad
        state["sum"]._vbox[0] += 1
        std = xp.sqrt(s)
        std += group["eps"]
        p._data -= clr * (grad / std)
