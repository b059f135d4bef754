"""Adamax, NAdam, RAdam, ASGD and Rprop, following PyTorch's single-tensor
implementations' formulas, each an elementwise form (`Optimizer._form`)."""
from __future__ import annotations

import math

from .optimizer import (Optimizer, _count_step, _direction, _read, _scalar_state, _step_once,
                        _write, _zeros)

__all__ = ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop"]


def _adam_prepare(p, state: dict, group: dict, **first) -> tuple:
    """What NAdam and RAdam share with Adam: state (`first` holds further entries to create
    on the first step, in PyTorch's key order), the step count, and the flags and scalars
    of `_adam_moments`. Returns (step, flags, state tensors, scalars)."""
    if not state:
        state["step"] = _scalar_state(0.0)
        state.update({k: _scalar_state(v) for k, v in first.items()})
        state["exp_avg"], state["exp_avg_sq"] = _zeros(p), _zeros(p)
    step = _step_once(state)
    b1, b2 = group["betas"]
    wd, decoupled = group["weight_decay"], group["decoupled_weight_decay"]
    return (step, (bool(group["maximize"]), decoupled and wd != 0, not decoupled and wd != 0),
            [state["exp_avg"], state["exp_avg_sq"]], (1 - group["lr"] * wd if decoupled else wd, 1 - b1, b2, 1 - b2))


def _adam_moments(maximize: bool, decay: bool, coupled: bool, p, g, m, v, wd, one_minus_b1, b2, one_minus_b2):
    """The direction (maximize, coupled or decoupled weight decay) and the two moments'
    updates: (p, g, m, v)."""
    g = _direction(g, p, maximize, coupled, wd)
    if decay:
        p = p * wd
    m = m + one_minus_b1 * (g - m)
    v = v * b2 + one_minus_b2 * g * g
    return p, g, m, v


class Adamax(Optimizer):
    _numbers = ("lr", "eps", "weight_decay")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        step = _count_step(state, p, "exp_avg", "exp_inf")
        b1, b2 = group["betas"]
        return ((bool(group["maximize"]), group["weight_decay"] != 0), [state["exp_avg"], state["exp_inf"]],
                (group["weight_decay"], 1 - b1, b2, group["eps"], group["lr"] / (1 - b1 ** step)))

    @staticmethod
    def _form(maximize: bool, decay: bool):
        def adamax(xp, p, g, m, u, wd, one_minus_b1, b2, eps, clr):
            g = _direction(g, p, maximize, decay, wd)
            m = m + one_minus_b1 * (g - m)
            u = xp.maximum(u * b2, xp.abs(g) + eps)
            return p - clr * m / u, m, u
        return adamax

class NAdam(Optimizer):
    _numbers = ("lr", "eps", "weight_decay", "momentum_decay")
    _number_state = ("step", "mu_product")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False,
                 *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        t, flags, tensors, scalars = _adam_prepare(p, state, group, mu_product=1.0)
        b1, b2 = group["betas"]
        lr, decay = group["lr"], group["momentum_decay"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * decay))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * decay))
        # (a float32 product, rounded each step as PyTorch's tensor is)
        mu_prod = _write(state, "mu_product", _read(state, "mu_product") * mu)
        return flags, tensors, scalars + (1 - b2 ** t, group["eps"], lr * (1 - mu) / (1 - mu_prod),
                                          lr * mu_next / (1 - mu_prod * mu_next))

    @staticmethod
    def _form(*flags):
        def nadam(xp, p, g, m, v, *scalars):
            p, g, m, v = _adam_moments(*flags, p, g, m, v, *scalars[:4])
            bias2, eps, grad_rate, moment_rate = scalars[4:]
            denom = xp.sqrt(v / bias2) + eps
            p = p - grad_rate * g / denom
            return p - moment_rate * m / denom, m, v
        return nadam

class RAdam(Optimizer):
    _numbers = ("lr", "eps", "weight_decay")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        t, flags, tensors, scalars = _adam_prepare(p, state, group)
        b1, b2 = group["betas"]
        bias2 = 1 - b2 ** t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2 ** t) / bias2
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) \
            if rho_t > 5.0 else 0.0
        return flags + (rho_t > 5.0,), tensors, scalars + (1 - b1 ** t, group["lr"], rect, math.sqrt(bias2),
                                                          group["eps"])

    @staticmethod
    def _form(*flags):
        def radam(xp, p, g, m, v, *scalars):
            p, g, m, v = _adam_moments(*flags[:3], p, g, m, v, *scalars[:4])
            bias1, lr, rect, bias2_sqrt, eps = scalars[4:]
            step = lr * (m / bias1)
            if flags[3]:      # the variance is tractable: the rectified adaptive step
                step = step * rect * (bias2_sqrt / (xp.sqrt(v) + eps))
            return p - step, m, v
        return radam

class ASGD(Optimizer):
    _numbers = ("lr", "weight_decay")
    _number_state = ("step", "eta", "mu")

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0.0, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        if not state:
            # PyTorch keeps eta and mu as float32 scalars, whatever the parameter's dtype
            state["step"] = _scalar_state(0.0)
            state["eta"], state["mu"] = _scalar_state(group["lr"]), _scalar_state(1.0)
            state["ax"] = _zeros(p)
        t = _step_once(state)
        eta, mu = _read(state, "eta"), _read(state, "mu")
        lr, lambd = group["lr"], group["lambd"]
        _write(state, "eta", lr / ((1 + lambd * lr * t) ** group["alpha"]))
        _write(state, "mu", 1 / max(1, t - group["t0"]))
        return ((bool(group["maximize"]), group["weight_decay"] != 0, mu != 1), [state["ax"]],
                (group["weight_decay"], 1 - lambd * eta, eta, mu))

    @staticmethod
    def _form(maximize: bool, decay: bool, averaging: bool):
        def asgd(xp, p, g, ax, wd, shrink, eta, mu):
            g = _direction(g, p, maximize, decay, wd)
            p = p * shrink - eta * g
            return p, ax + (p - ax) * mu if averaging else p
        return asgd

class Rprop(Optimizer):
    _numbers = ("lr",)

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _prepare(self, p, state: dict, group: dict) -> tuple:
        if not state:
            state["step"] = _scalar_state(0.0)
            state["prev"] = _zeros(p)
            state["step_size"] = _zeros(p, group["lr"])
        _step_once(state)
        (etaminus, etaplus), (lo, hi) = group["etas"], group["step_sizes"]
        return (bool(group["maximize"]),), [state["prev"], state["step_size"]], (etaminus, etaplus, lo, hi, 0, 1)

    @staticmethod
    def _form(maximize: bool):
        def rprop(xp, p, g, prev, step_size, etaminus, etaplus, lo, hi, zero, one):
            if maximize:
                g = -g
            sign = xp.sign(g * prev)
            factor = xp.where(sign > zero, etaplus, xp.where(sign < zero, etaminus, one))
            step_size = xp.minimum(xp.maximum(step_size * factor, lo), hi)
            g = xp.where(sign < zero, zero, g)
            return p - xp.sign(g) * step_size, g, step_size
        return rprop

