"""Adam and AdamW, following PyTorch's single-tensor implementation step for step.

Per parameter with gradient g at step t (``lerp`` and the operation order are
PyTorch's, so float32 results agree with it to rounding):

    g = g + weight_decay * p  (Adam)  |  p = p * (1 - lr * weight_decay)  (AdamW, decoupled_weight_decay)
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    v_hat = max(v_hat, v) if amsgrad else v
    p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)

``fused`` (PyTorch's argument): the update of a group's CPU float parameters can run as
one numba kernel, one pass over every p, g, m and v instead of eleven array operations
per parameter (`compiler/cpu/kernels/foreach.py`), bitwise the array path's results. ``None`` (default): fused
when the eligible parameters hold at least ``FUSED_MIN`` elements together, once numba is
loaded in the process (an eager script never pays numba's start-up) and unless
compilation is off. ``True``: fused for every parameter (CPU only). ``False``: never.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ..device import CPU
from ..threads import PARALLEL_MIN
from .optimizer import Optimizer, _bump, _check_betas, _count_step, _zeros

__all__ = ["Adam", "AdamW", "FUSED_MIN"]

# With fused=None, a group whose parameters hold fewer elements in all keeps the array
# path: it saves microseconds per step, and a small model never waits for the kernel's
# first compile. The fused kernel is the default exactly where it runs parallel: one
# size, one definition.
FUSED_MIN = PARALLEL_MIN
_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


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

    def _prepare(self, p, state: dict, group: dict, corrections: dict) -> tuple:
        """Start parameter `p`'s step: create its state on the first one, count the step,
        bump the moments' versions; returns (m, v, vmax or None, step_size, bc2_sqrt).
        `corrections`: step -> (step_size, bc2_sqrt) already computed for this group."""
        step = _count_step(state, p, "exp_avg", "exp_avg_sq")
        got = corrections.get(step)
        if got is None:
            beta1, beta2 = group["betas"]
            got = corrections[step] = (group["lr"] / (1 - beta1 ** step), math.sqrt(1 - beta2 ** step))
        moments = [state["exp_avg"], state["exp_avg_sq"]]
        if group["amsgrad"]:
            if state.get("max_exp_avg_sq") is None:  # also: switched on after some steps
                state["max_exp_avg_sq"] = _zeros(p)
            moments.append(state["max_exp_avg_sq"])
        _bump(*moments)
        return (moments[0]._data, moments[1]._data, moments[2]._data if len(moments) > 2 else None,
                got[0], got[1])

    def _update_group(self, todo: list, group: dict) -> None:
        """Every parameter of `group` that has a gradient, with one kernel launch per dtype
        and step count where the fused kernel applies (`_fused_step`: small
        parameters join the big ones instead of taking the array path), the others one by one."""
        fused = group.get("fused")
        batches: dict = {}     # (dtype, step) -> [(p, grad, m, v, vmax, step_size, bc2_sqrt), ...]
        # whether this group may take the fused kernel at all (numba loaded, compiling on):
        # asked once per step, not per parameter
        may_fuse = fused is True or (fused is None and _fused_default())
        corrections: dict = {}
        state_of = self.state
        for p, grad in todo:
            state = state_of[p]
            m, v, vmax, step_size, bc2 = self._prepare(p, state, group, corrections)
            if may_fuse and _fits(p._data, grad, m, v, vmax):
                key = (grad.dtype, state["step"])
                batch = batches.get(key)
                if batch is None:
                    batch = batches[key] = []
                batch.append((p, grad, m, v, vmax, step_size, bc2))
            else:
                self._apply(p, grad, m, v, vmax, step_size, bc2, group)
        for batch in batches.values():
            ran = False   # fused=None and small parameters only: they never wait for a compile
            if fused is not None or sum(item[0]._data.size for item in batch) >= FUSED_MIN:
                # fused=None in background compile mode: the array path runs until the
                # kernel is loaded (compiler/tiers.py); fused=True waits for it.
                ran = _fused_step(batch, group, wait=fused is True)
            if not ran:
                for item in batch:
                    self._apply(*item, group)

    def _apply(self, p, grad, m, v, vmax, step_size: float, bias_correction2_sqrt: float, group: dict) -> None:
        """The array path: the update as array operations (numpy or cupy, `_apply_blocks`)."""
        _apply_blocks(p._data, grad, m, v, vmax, step_size, bias_correction2_sqrt, group,
                      group["decoupled_weight_decay"], p._xp())


def _fused_step(batch: list, group: dict, wait: bool) -> bool:
    """The batch's update (items as `Adam._update_group` makes them, of one dtype and step)
    in one kernel launch (`foreach.run`), or False where the kernel is not loaded."""
    from ..compiler.cpu.kernels import foreach
    beta1, beta2 = group["betas"]
    lr, wd, w = group["lr"], group["weight_decay"], 1 - beta1
    decay = group["decoupled_weight_decay"] and wd != 0
    coupled = not group["decoupled_weight_decay"] and wd != 0
    flags = (bool(group["maximize"]), decay, coupled, abs(w) < 0.5, bool(group["amsgrad"]))
    form = _forms.get(flags) or _forms.setdefault(flags, _adam_form(*flags))
    columns = [[item[0]._data.reshape(-1) for item in batch]]
    columns += [[a.reshape(-1) for a in arrays] for arrays in list(zip(*batch))[1:4 + flags[-1]]]
    # the numbers as numpy takes a Python float beside an array: in the array's dtype
    scalars = (1 - lr * wd if decay else wd, w if flags[3] else 1 - w, beta2, 1 - beta2, batch[0][6],
               group["eps"], -batch[0][5])
    return foreach.run(form, ("adam",) + flags, columns, scalars, (0, 2, 3, 4)[:3 + flags[-1]], wait=wait,
                       parallel_min=PARALLEL_MIN)


_forms: dict = {}


def _adam_form(maximize: bool, decay: bool, coupled: bool, small: bool, amsgrad: bool):
    """Adam's update of one parameter as a function of tensors, `_apply_blocks`'s operations
    in its order (what `foreach.run` traces into one kernel)."""
    from ..ops.elementwise import maximum

    def adam_update(p, g, m, v, *rest):
        if amsgrad:
            vmax, *rest = rest
        wd, w, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size = rest
        if maximize:
            g = -g
        if decay:
            p = p * wd
        elif coupled:
            g = g + p * wd
        m = m + (g - m) * w if small else g - (g - m) * w    # lerp: w or 1 - w (`_apply_blocks`)
        v = v * beta2 + g * one_minus_beta2 * g
        if amsgrad:
            vmax = maximum(vmax, v)
        p = p + m * neg_step_size / ((vmax if amsgrad else v).sqrt() / bc2_sqrt + eps)
        return (p, m, v, vmax) if amsgrad else (p, m, v)
    return adam_update


def _check_fused(name: str, group: dict) -> None:
    """A group's ``fused`` (Adam, AdamW, SGD): None, True or False; True for CPU parameters only."""
    fused = group.get("fused")
    if fused is not None and not isinstance(fused, bool):  # (1 == True: not enough)
        raise TypeError(f"{name}: fused must be None, True or False, got {fused!r}")
    if fused:  # (float dtypes are checked for every optimizer)
        for k, p in enumerate(group["params"]):
            if p.device is not CPU:
                raise ValueError(f"{name}: fused=True supports parameters on the CPU only; "
                                 f"parameter {k} is on {p.device}")


def _fused_default() -> bool:
    """``fused=None``: the kernel once numba is loaded and compilation is on (module docstring)."""
    from ..jit.config import is_eager
    return "numba" in sys.modules and not is_eager()


def _fits(first, *arrays) -> bool:
    """p, g, m, v (and vmax, or None) as the kernel takes them: `_blockable` arrays of float32
    or float64 (a strided view, cupy arrays: the array path, same results)."""
    return _blockable(first, *arrays) and first.dtype in _FUSED_DTYPES


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01): p *= 1 - lr * weight_decay before the step."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


# The array path goes `_BLOCK` elements at a time through three scratch rows: each
# block's eleven operations run while its p, g, m, v stay in cache, and no full-size
# temporary is allocated and page-faulted in (a cold first step: 14 -> 9 ms).
_BLOCK = 1 << 14


def _blockable(*arrays) -> bool:
    """Whether `arrays` (None: absent) are numpy arrays of one floating dtype and shape, in C order."""
    arrays = [a for a in arrays if a is not None]
    first = arrays[0]
    return all(type(a) is np.ndarray and a.dtype == first.dtype and a.shape == first.shape
               and a.flags.c_contiguous for a in arrays) and first.dtype.kind == "f"


def _apply_blocks(p, grad, m, v, vmax, step_size: float, bc2_sqrt: float, group: dict,
                  decoupled: bool, xp=np) -> None:
    """Adam's update of p, m, v (and vmax) in place, PyTorch's operations in its order, each
    in the parameter's dtype: on `_BLOCK`-element blocks of the flattened arrays where they
    are numpy arrays of one shape, dtype and C order (`_blockable`), else on the whole
    arrays (elementwise: the same values either way)."""
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    beta1, beta2 = group["betas"]
    w = 1 - beta1
    if _blockable(p, grad, m, v, vmax):
        flat = [a.reshape(-1) if a is not None else None for a in (p, grad, m, v, vmax)]
        n = flat[0].size
        rows = np.empty((3, min(n, _BLOCK)), dtype=p.dtype)
        blocks = ((tuple(a[lo:lo + _BLOCK] if a is not None else None for a in flat),
                   rows[:, :min(n - lo, _BLOCK)]) for lo in range(0, n, _BLOCK))
    else:
        blocks = [((p, grad, m, v, vmax), xp.empty((3,) + p.shape, dtype=p.dtype))]
    for (pb, gb, mb, vb, xb), (a, b, c) in blocks:
        if group["maximize"]:
            gb = xp.negative(gb, out=c)
        if wd != 0:
            if decoupled:
                pb *= 1 - lr * wd
            else:
                xp.multiply(pb, wd, out=a)
                gb = xp.add(gb, a, out=c)
        if abs(w) < 0.5:          # m = lerp(m, g, w), PyTorch's two-sided form (accurate near w = 1)
            xp.subtract(gb, mb, out=a)
            a *= w
            mb += a
        else:
            xp.subtract(gb, mb, out=a)
            a *= 1 - w
            xp.subtract(gb, a, out=mb)
        vb *= beta2
        xp.multiply(gb, 1 - beta2, out=a)
        a *= gb
        vb += a
        if xb is not None:
            xp.maximum(xb, vb, out=xb)
            vb = xb
        xp.sqrt(vb, out=a)
        a /= bc2_sqrt
        a += eps
        xp.multiply(mb, -step_size, out=b)
        b /= a
        pb += b
