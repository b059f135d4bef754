"""L-BFGS with an optional strong-Wolfe line search, following PyTorch's ``optim.LBFGS``.

``step(closure)`` runs up to ``max_iter`` quasi-Newton iterations; ``closure`` clears
the gradients, computes the loss, calls ``backward()`` and returns the loss. All
parameters are treated as one flat vector (numpy/cupy arrays, outside autograd): the
search direction comes from the two-loop recursion over the last ``history_size``
(step, gradient change) pairs; the step length is ``lr`` (``min(1, 1/|g|_1) * lr`` on
the very first iteration) or, with ``line_search_fn="strong_wolfe"``, the result of a
bracketing/zoom search with cubic interpolation. The stopping tests, their order and
the state kept between calls (``d``, ``t``, ``old_dirs``, ``old_stps``, ``ro``,
``H_diag``, ``prev_flat_grad``, ``prev_loss``, ``func_evals``, ``n_iter``) are PyTorch's,
so the iterates agree with it to rounding.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import bf16, dtypes as _dt
from ..autograd.grad_mode import enable_grad
from ..ops.eager import refuse_effect
from ..tensor import Tensor
from .optimizer import Optimizer, _check_number


def _wide(dtype):
    """The dtype a parameter's numbers take part in: float32 for bfloat16's uint16 words."""
    return np.float32 if dtype == bf16.STORAGE else dtype


__all__ = ["LBFGS"]


def _cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """Minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1, g2, clipped to
    `bounds` (default: the interval between x1 and x2); the midpoint when the cubic has none."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = disc ** 0.5
    if x1 <= x2:
        x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, lo), hi)


def _strong_wolfe(evaluate: Callable, t: float, d, f: float, g, gtd: float, c1: float = 1e-4,
                  c2: float = 0.9, tolerance_change: float = 1e-9, max_ls: int = 25):
    """Find a step t along d meeting the strong Wolfe conditions.

    ``evaluate(t) -> (loss, flat_grad)`` at x + t * d. Returns (loss, grad, t, evaluations).
    Phase 1 grows the step until a bracket [lo, hi] containing acceptable points is found;
    phase 2 shrinks that bracket by cubic interpolation ("zoom").
    """
    d_norm = float(abs(d).max())
    f_new, g_new = evaluate(t)
    evals = 1
    gtd_new = float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, b_f, b_g, b_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, b_f, b_g, b_gtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, b_f, b_g, b_gtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new], [gtd_prev, gtd_new]
            break
        # Extrapolate: the next trial lies between 1.01 t and 10 t.
        t_next = _cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                                bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = t, f_new, g_new, gtd_new
        t = t_next
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, b_f, b_g, b_gtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]

    insufficient_progress = False
    lo, hi = (0, 1) if b_f[0] <= b_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break   # the bracket is too small to make progress
        t = _cubic_minimum(bracket[0], b_f[0], b_gtd[0], bracket[1], b_f[1], b_gtd[1])
        # Keep the trial away from the bracket's ends; when the last step already had to be
        # pushed in (or t fell outside), push it 10% of the width inside.
        b_max, b_min = max(bracket), min(bracket)
        eps = 0.1 * (b_max - b_min)
        if min(b_max - t, t - b_min) < eps:
            if insufficient_progress or t >= b_max or t <= b_min:
                t = b_max - eps if abs(t - b_max) < abs(t - b_min) else b_min + eps
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = float(g_new.dot(d))
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= b_f[lo]:
            bracket[hi], b_f[hi], b_g[hi], b_gtd[hi] = t, f_new, g_new, gtd_new
            lo, hi = (0, 1) if b_f[0] <= b_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[hi] - bracket[lo]) >= 0:
                bracket[hi], b_f[hi], b_g[hi], b_gtd[hi] = bracket[lo], b_f[lo], b_g[lo], b_gtd[lo]
            bracket[lo], b_f[lo], b_g[lo], b_gtd[lo] = t, f_new, g_new, gtd_new
    return b_f[lo], b_g[lo], bracket[lo], evals


class LBFGS(Optimizer):
    """PyTorch's L-BFGS. Supports one parameter group; ``step`` requires a closure."""

    _steps_complex = False   # (its own step: real parameters only)

    def __init__(self, params, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _validate(self, group: dict) -> None:
        _check_number("LBFGS", "learning rate lr", group["lr"])
        for k in ("max_iter", "max_eval", "history_size"):
            v = group[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"LBFGS: {k} must be a positive int, got {v!r}")
        _check_number("LBFGS", "tolerance_grad", group["tolerance_grad"])
        _check_number("LBFGS", "tolerance_change", group["tolerance_change"])
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: only line_search_fn=None or 'strong_wolfe' are supported, got "
                             f"{group['line_search_fn']!r}")

    def add_param_group(self, param_group: dict) -> None:
        raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")

    # PyTorch's state holds tensors (the parameters' dtype) where this one holds arrays and,
    # for the curvature scalars, floats
    _number_state = ("ro", "H_diag")

    def _exported_state(self, s: dict) -> dict:
        return {k: self._exported(k, v) for k, v in s.items()}

    def _exported(self, k: str, v):
        if isinstance(v, list):
            return [self._exported(k, x) for x in v]
        if k in self._number_state or hasattr(v, "dtype"):
            p = self._params[0]
            wide = p._xp().asarray(v, dtype=_wide(p._data.dtype))
            return Tensor._wrap(wide, _dt.as_dtype(wide.dtype), p.device).to(dtype=p.dtype)
        return v

    def _load_value(self, p, pkey, k, v):
        if isinstance(v, list):
            return [self._load_value(p, pkey, k, x) for x in v]
        if isinstance(v, Tensor):
            v = v.to(device=p.device, dtype=_dt.float32 if p.dtype is _dt.bfloat16 else p.dtype)._data
            return float(v) if k in self._number_state else v.copy()
        return v

    # ---- flat views of parameters and gradients ---------------------------------------
    def _xp(self):
        return self._params[0]._xp()

    # bfloat16 parameters (uint16 words, no arithmetic of their own) take part in float32
    def _flat_grad(self):
        xp = self._xp()
        parts = [xp.zeros(p._data.size, _wide(p._data.dtype)) if p.grad is None else p.grad._data.reshape(-1)
                 for p in self._params]
        return xp.concatenate([bf16.to_float32(a) if a.dtype == bf16.STORAGE else a for a in parts])

    def _add_to_params(self, t: float, d) -> None:
        offset = 0
        for p in self._params:
            n = p._data.size
            step = (t * d[offset:offset + n]).reshape(p._data.shape)
            if p._data.dtype == bf16.STORAGE:
                p._data[...] = bf16.to_bfloat16(bf16.to_float32(p._data) + step)
            else:
                p._data += step.astype(p._data.dtype, copy=False)
            p._vbox[0] += 1
            offset += n

    def _set_params(self, values: list) -> None:
        for p, v in zip(self._params, values):
            p._data[...] = v
            p._vbox[0] += 1

    def step(self, closure: Callable | None = None):
        refuse_effect("LBFGS.step updates the parameters and its state")
        if closure is None:
            raise RuntimeError("LBFGS.step requires a closure that reevaluates the model and returns the loss")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        history_size, line_search = group["history_size"], group["line_search_fn"]

        def evaluate() -> float:
            with enable_grad():
                return float(closure())

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if float(abs(flat_grad).max()) <= tol_grad:
            return orig_loss   # already at a stationary point

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                h_diag = 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = float(y.dot(s))
                if ys > 1e-10:   # keep only curvature pairs that keep the Hessian estimate positive
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(y.dot(y))
                # Two-loop recursion: d = -H g with H the L-BFGS inverse-Hessian estimate.
                al = [0.0] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = float(old_stps[i].dot(q)) * ro[i]
                    q = q - al[i] * old_dirs[i]
                r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = float(old_dirs[i].dot(r)) * ro[i]
                    r = r + (al[i] - be_i) * old_stps[i]
                d = r
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            t = min(1.0, 1.0 / float(abs(flat_grad).sum())) * lr if state["n_iter"] == 1 else lr
            gtd = float(flat_grad.dot(d))
            if gtd > -tol_change:
                break   # not a descent direction (to tolerance)

            ls_evals = 0
            if line_search is not None:
                x_init = [p._data.copy() for p in self._params]

                def at(step_t, _d=d, _x=x_init):
                    self._add_to_params(step_t, _d)
                    f_t = evaluate()
                    g_t = self._flat_grad()
                    self._set_params(_x)
                    return f_t, g_t

                loss, flat_grad, t, ls_evals = _strong_wolfe(at, t, d, loss, flat_grad, gtd,
                                                              max_ls=max_eval - current_evals)
                self._add_to_params(t, d)
                opt_cond = float(abs(flat_grad).max()) <= tol_grad
            else:
                self._add_to_params(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    # Re-evaluate except on the last iteration (the caller's next step will).
                    loss = evaluate()
                    flat_grad = self._flat_grad()
                    opt_cond = float(abs(flat_grad).max()) <= tol_grad
                    ls_evals = 1
            current_evals += ls_evals
            state["func_evals"] += ls_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if float(abs(d * t).max()) <= tol_change or abs(loss - prev_loss) < tol_change:
                break   # the step or the loss change is below tolerance

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss
