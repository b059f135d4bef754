"""Adagrad, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g at step t:

    g = g + weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay)
    s = s + g * g;  p = p - clr * g / (sqrt(s) + eps)

The accumulator ``sum`` starts at ``initial_accumulator_value`` and, as in PyTorch, is
created with the optimizer (so it is in ``state_dict()`` before the first step).
"""
from __future__ import annotations

from .optimizer import Optimizer, _check_fused, _direction, _scalar_state, _step_once, _zeros

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    _numbers = ("learning rate lr", "lr_decay", "weight_decay", "initial_accumulator_value", "epsilon eps")

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize, fused=fused,
                                      **self._impl_options(foreach, None, differentiable)))
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, self.state[p], group)

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        _check_fused("Adagrad", group)

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._init_state(p, self.state[p], group)

    @staticmethod
    def _init_state(p, state, group) -> None:
        if not state:
            state["step"] = _scalar_state(0.0)
            state["sum"] = _zeros(p, group["initial_accumulator_value"])

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        self._init_state(p, state, group)
        step = _step_once(state)
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        return ((bool(group["maximize"]), group["weight_decay"] != 0), [state["sum"]],
                (group["weight_decay"], group["eps"], clr))

    @staticmethod
    def _form(maximize: bool, decay: bool):
        def adagrad(xp, p, g, s, wd, eps, clr):
            g = _direction(g, p, maximize, decay, wd)
            s = s + g * g
            p = p - clr * (g / (xp.sqrt(s) + eps))
            return p, s
        return adagrad
