"""Adamax, NAdam, RAdam, ASGD and Rprop, following PyTorch's single-tensor
implementations' formulas (numpy on each parameter's memory, as RMSprop does)."""
from __future__ import annotations

import math

from .optimizer import Optimizer, _bump, _count_step, _direction, _new_state_tensor, _zeros

__all__ = ["Adamax", "NAdam", "RAdam", "ASGD", "Rprop"]


def _adam_moments(p, grad, state: dict, group: dict, **first):
    """The first steps NAdam and RAdam share with Adam: state, step count, maximize,
    coupled or decoupled weight decay, and the two moment updates; `first` holds further state
    entries to create on the first step (in PyTorch's key order). Returns (grad, m, v)."""
    b1, b2 = group["betas"]
    if not state:
        state["step"] = 0
        state.update(first)
        state["exp_avg"], state["exp_avg_sq"] = _zeros(p), _zeros(p)
    state["step"] += 1
    grad = _direction(grad, p, group, group["decoupled_weight_decay"])
    m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
    m += (1 - b1) * (grad - m)
    v *= b2
    v += (1 - b2) * grad * grad
    return grad, m, v


class Adamax(Optimizer):
    _numbers = ("lr", "eps", "weight_decay")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        b1, b2 = group["betas"]
        _count_step(state, p, "exp_avg", "exp_inf")
        grad = _direction(grad, p, group)
        m, u = state["exp_avg"]._data, state["exp_inf"]._data
        m += (1 - b1) * (grad - m)
        xp.maximum(u * b2, xp.abs(grad) + group["eps"], out=u)
        clr = group["lr"] / (1 - b1 ** state["step"])
        p._data -= clr * m / u
        _bump(p, state["exp_avg"], state["exp_inf"])


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

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        b1, b2 = group["betas"]
        grad, m, v = _adam_moments(p, grad, state, group, mu_product=1.0)
        t = state["step"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * group["momentum_decay"]))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * group["momentum_decay"]))
        state["mu_product"] *= mu
        mu_prod = state["mu_product"]
        denom = xp.sqrt(v / (1 - b2 ** t)) + group["eps"]
        p._data -= group["lr"] * (1 - mu) / (1 - mu_prod) * grad / denom
        p._data -= group["lr"] * mu_next / (1 - mu_prod * mu_next) * m / denom
        _bump(p, state["exp_avg"], state["exp_avg_sq"])


class RAdam(Optimizer):
    _numbers = ("lr", "eps", "weight_decay")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        b1, b2 = group["betas"]
        _, m, v = _adam_moments(p, grad, state, group)
        t = state["step"]
        bias1 = 1 - b1 ** t
        bias2 = 1 - b2 ** t
        m_hat = m / bias1
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * (b2 ** t) / bias2
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = math.sqrt(bias2) / (xp.sqrt(v) + group["eps"])
            p._data -= group["lr"] * m_hat * rect * adaptive
        else:
            p._data -= group["lr"] * m_hat
        _bump(p, state["exp_avg"], state["exp_avg_sq"])


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

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        if not state:
            state["step"] = 0
            # PyTorch keeps eta and mu as float32 scalars, whatever the parameter's dtype
            state["eta"], state["mu"] = float(xp.float32(group["lr"])), 1.0
            state["ax"] = _zeros(p)
        state["step"] += 1
        t = state["step"]
        grad = _direction(grad, p, group)
        eta, mu = state["eta"], state["mu"]
        p._data *= 1 - group["lambd"] * eta
        p._data -= eta * grad
        ax = state["ax"]._data
        if mu != 1:
            ax += (p._data - ax) * mu
        else:
            ax[...] = p._data
        state["eta"] = float(xp.float32(group["lr"] / ((1 + group["lambd"] * group["lr"] * t) ** group["alpha"])))
        state["mu"] = float(xp.float32(1 / max(1, t - group["t0"])))
        _bump(p, state["ax"])


class Rprop(Optimizer):
    _numbers = ("lr",)

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False):
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize,
                                      **self._impl_options(foreach, capturable, differentiable)))

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        etaminus, etaplus = group["etas"]
        lo, hi = group["step_sizes"]
        if not state:
            state["step"] = 0
            state["prev"] = _zeros(p)
            state["step_size"] = _new_state_tensor(p, xp.full_like(p._data, group["lr"]))
        state["step"] += 1
        if group["maximize"]:
            grad = -grad
        prev, step_size = state["prev"]._data, state["step_size"]._data
        sign = xp.sign(grad * prev)
        factor = xp.where(sign > 0, etaplus, xp.where(sign < 0, etaminus, 1.0)).astype(p._data.dtype)
        step_size *= factor
        xp.clip(step_size, lo, hi, out=step_size)
        g = xp.where(sign < 0, 0, grad).astype(p._data.dtype)
        p._data -= xp.sign(g) * step_size
        prev[...] = g
        _bump(p, state["prev"], state["step_size"])
