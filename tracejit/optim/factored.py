"""Adafactor, Muon and SparseAdam, following PyTorch's single-tensor formulas (numpy or
cupy arithmetic on each parameter's memory, as the other optimizers here do).

* Adafactor keeps, for a parameter of two or more dims, only the mean squared gradient of
  each row and of each column (``row_var``, ``col_var``) and rebuilds the second moment as
  their outer product; a vector keeps the full ``variance``. Relative step size
  ``min(lr, 1/sqrt(t))`` scaled by the parameter's RMS, update clipped to RMS ``d``.
* Muon (2-D parameters only) runs Nesterov momentum, orthogonalizes the update with a
  quintic Newton-Schulz iteration and applies it with decoupled weight decay. As in
  PyTorch, the iteration runs in bfloat16: each product is accumulated in float32 and
  rounded to bfloat16, so results agree with PyTorch's to bfloat16 precision.
* SparseAdam updates only the rows of a parameter that its gradient touches. tracejit's
  gradients are dense (``nn.Embedding(sparse=True)`` gives a dense gradient with zero rows
  for the indices not looked up), so the touched rows are those along dim 0 with a nonzero
  gradient entry: for an embedding this is exactly the set of rows PyTorch's sparse
  gradient lists (a looked-up row whose gradient is exactly zero is the one difference).
"""
from __future__ import annotations

import math

import numpy as np

from .. import bf16
from .optimizer import (Optimizer, _bump, _check_betas, _check_number, _new_state_tensor,
                        _scalar_state, _step_once, _zeros)

__all__ = ["Adafactor", "Muon", "SparseAdam"]


def _check_bool(opt: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{opt}: {name} must be a bool, got {value!r}")


# ---------------------------------------------------------------- Adafactor
class Adafactor(Optimizer):
    def __init__(self, params, lr: float = 1e-2, beta2_decay: float = -0.8, eps=(None, 1e-3),
                 d: float = 1.0, weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False):
        if foreach is not None and not isinstance(foreach, bool):
            raise TypeError(f"Adafactor: foreach must be None or a bool, got {foreach!r}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, foreach=foreach, maximize=maximize))

    def _validate(self, group: dict) -> None:
        _check_number("Adafactor", "learning rate lr", group["lr"])
        _check_number("Adafactor", "beta2_decay", group["beta2_decay"], low=None, high=0.0)
        eps = group["eps"]
        if not isinstance(eps, tuple) or len(eps) != 2:
            raise ValueError(f"Adafactor: eps must be a pair (eps1, eps2), got {eps!r}")
        if eps[0] is not None:
            _check_number("Adafactor", "epsilon1 eps[0]", eps[0])
        _check_number("Adafactor", "epsilon2 eps[1]", eps[1])
        _check_number("Adafactor", "clipping threshold d", group["d"], low=1.0)
        _check_number("Adafactor", "weight_decay", group["weight_decay"])
        _check_bool("Adafactor", "maximize", group["maximize"])

    def _load_value(self, p, pkey, k, v):
        if k in ("row_var", "col_var"):     # factored moments: the parameter's shape with a 1
            from ..tensor import Tensor
            if isinstance(v, Tensor):
                want = list(p.shape)
                want[-1 if k == "row_var" else -2] = 1
                if tuple(v.shape) != tuple(want):
                    raise ValueError(f"Adafactor.load_state_dict: state {k!r} of parameter {pkey} has "
                                     f"shape {tuple(v.shape)}, expected {tuple(want)}")
                return Tensor._wrap(v.to(device=p.device, dtype=p.dtype)._data.copy(), p.dtype, p.device)
        return super()._load_value(p, pkey, k, v)

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        x = p._data
        if not state:
            state["step"] = _scalar_state(0.0)
            if x.ndim > 1:
                state["row_var"] = _new_state_tensor(p, xp.zeros(x.shape[:-1] + (1,), dtype=x.dtype))
                state["col_var"] = _new_state_tensor(
                    p, xp.zeros(x.shape[:-2] + (1,) + x.shape[-1:], dtype=x.dtype))
            else:
                state["variance"] = _new_state_tensor(p, xp.zeros_like(x))
        names = ("row_var", "col_var") if x.ndim > 1 else ("variance",)
        arrays = [x] + [state[k]._data for k in names]
        step = _step_once(state)
        eps_dtype = 2.0 ** -7 if x.dtype == bf16.STORAGE else float(np.finfo(x.dtype).eps)
        with bf16.widened(arrays, [grad]) as (wide, (g,)):
            self._step(xp, wide, g, step, group, eps_dtype)
        _bump(*(state[k] for k in names))

    @staticmethod
    def _step(xp, arrays: list, grad, t: float, group: dict, eps_dtype: float) -> None:
        """One step on [x, row_var, col_var] (or [x, variance]) in place, step count `t`."""
        x, *moments = arrays
        if group["maximize"]:
            grad = -grad
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = eps_dtype
        lr = group["lr"]
        beta = t ** group["beta2_decay"]     # 1 - beta2_t
        rho = min(lr, 1 / t ** 0.5)
        alpha = max(eps2, float(xp.sqrt((x * x).sum())) / x.size ** 0.5) * rho
        if group["weight_decay"] != 0:
            x *= 1 - lr * group["weight_decay"]
        gg = grad * grad
        if x.ndim > 1:
            row, col = moments
            row += beta * (gg.mean(axis=-1, keepdims=True) - row)
            col += beta * (gg.mean(axis=-2, keepdims=True) - col)
            var = row @ col
            var /= xp.maximum(row.mean(axis=-2, keepdims=True), eps1)
        else:
            v, = moments
            v += beta * (gg - v)
            var = v.copy()
        update = grad / xp.sqrt(xp.maximum(var, eps1 * eps1))
        denom = max(1.0, float(xp.sqrt((update * update).sum())) / (update.size ** 0.5 * group["d"]))
        x -= (alpha / denom) * update


# ---------------------------------------------------------------- Muon
def _bf16(xp, a):
    """float32 array `a` rounded to the nearest bfloat16 (ties to even), kept as float32."""
    a = xp.ascontiguousarray(a, dtype=xp.float32)
    u = a.view(xp.uint32)
    r = (u + (xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1)))) & xp.uint32(0xFFFF0000)
    return r.view(xp.float32)


def _orthogonalize(xp, g, coefficients, steps: int, eps: float):
    """The Newton-Schulz quintic iteration toward the orthogonal factor of 2-D `g`, in bfloat16
    (float32 accumulation, rounded after each step)."""
    a, b, c = coefficients
    x = _bf16(xp, g)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    norm = _bf16(xp, xp.sqrt((x * x).sum(dtype=xp.float32)).reshape(1))[0]
    x = _bf16(xp, x / max(float(norm), eps))
    for _ in range(steps):
        gram = _bf16(xp, x @ x.T)
        gram_update = _bf16(xp, b * gram + c * (gram @ gram))
        x = _bf16(xp, a * x + gram_update @ x)
    return x.T if tall else x


class Muon(Optimizer):
    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95,
                 nesterov: bool = True, ns_coefficients=(3.4445, -4.7750, 2.0315), eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      nesterov=nesterov, ns_coefficients=tuple(ns_coefficients), eps=eps,
                                      ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn))

    _numbers = ("learning rate lr", "momentum", "weight_decay", "eps")

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        _check_bool("Muon", "nesterov", group["nesterov"])
        steps = group["ns_steps"]
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps < 100:
            raise ValueError(f"Muon: ns_steps must be an int in [0, 100), got {steps!r}")
        co = group["ns_coefficients"]
        if len(co) != 3:
            raise ValueError(f"Muon: ns_coefficients must be three numbers (a, b, c), got {co!r}")
        if group["adjust_lr_fn"] not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', "
                             f"got {group['adjust_lr_fn']!r}")
        for i, p in enumerate(group["params"]):
            if p.ndim != 2:
                raise ValueError(f"Muon only supports 2D parameters, but parameter {i} has size "
                                 f"{tuple(p.shape)}; optimize it with AdamW")

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = _zeros(p)
        mu = group["momentum"]
        with bf16.widened([state["momentum_buffer"]._data], [grad]) as ((buf,), (grad,)):
            buf += (1 - mu) * (grad - buf)
        _bump(state["momentum_buffer"])
        update = grad + mu * (buf - grad) if group["nesterov"] else buf
        o = _orthogonalize(xp, update.astype(xp.float32), group["ns_coefficients"], group["ns_steps"],
                           group["eps"])
        rows, cols = p._data.shape
        fn = group["adjust_lr_fn"]
        ratio = (math.sqrt(max(1, rows / cols)) if fn in (None, "original")
                 else 0.2 * math.sqrt(max(rows, cols)))
        lr = group["lr"]
        with bf16.widened([p._data]) as ((x,), _):
            x *= 1 - lr * group["weight_decay"]
            x -= (lr * ratio) * o.astype(x.dtype)


# ---------------------------------------------------------------- SparseAdam
class SparseAdam(Optimizer):
    _number_state = ()   # (PyTorch's SparseAdam counts its step in an int)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))

    def _validate(self, group: dict) -> None:
        _check_number("SparseAdam", "learning rate lr", group["lr"])
        if group["lr"] == 0:
            raise ValueError("SparseAdam: invalid learning rate lr: 0 (must be > 0)")
        _check_number("SparseAdam", "epsilon eps", group["eps"])
        if group["eps"] == 0:
            raise ValueError("SparseAdam: invalid epsilon eps: 0 (must be > 0)")
        _check_betas("SparseAdam", group)
        _check_bool("SparseAdam", "maximize", group["maximize"])

    def _update(self, p, grad, state, group) -> None:
        xp = p._xp()
        if not state:   # (PyTorch's SparseAdam counts its step in an int)
            state["step"] = 0
            state["exp_avg"], state["exp_avg_sq"] = _zeros(p), _zeros(p)
        state["step"] += 1
        flat = grad.reshape(grad.shape[0], -1) if grad.ndim else grad.reshape(1, 1)
        rows = xp.nonzero((flat != 0).any(axis=1))[0]
        if rows.size == 0:
            return
        b1, b2 = group["betas"]
        t = state["step"]
        step_size = group["lr"] * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        at = (...,) if grad.ndim == 0 else rows
        with bf16.widened([p._data, state["exp_avg"]._data, state["exp_avg_sq"]._data], [grad]) as ((x, m, v), (g,)):
            g = -g[at] if group["maximize"] else g[at]
            m[at] += (1 - b1) * (g - m[at])
            v[at] += (1 - b2) * (g * g - v[at])
            x[at] += -step_size * (m[at] / (xp.sqrt(v[at]) + group["eps"]))
        _bump(state["exp_avg"], state["exp_avg_sq"])
