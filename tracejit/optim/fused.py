"""Adam/AdamW's update of one parameter in one pass over memory: numba kernels.

Why: the array-at-a-time update in `adam.Adam._update` is eleven numpy operations, each
a full pass over the parameter, its gradient or a moment, most allocating a temporary.
For the MLP benchmark's 1.9M parameters that took 5.7-6.0 ms of a 26 ms training step;
one parallel pass reads p, g, m, v and writes p, m, v once.

Same arithmetic, same results: `_adam_element` performs the numpy path's operations in
the same order and in the parameter's dtype, with every hyperparameter converted to that
dtype first, as numpy converts a Python float next to a float32 array. numba contracts
no multiply-add without fastmath, so the fused update is bitwise the numpy one (the
tests check it). Flags are the same in every iteration: LLVM moves their tests out of
the loop.

The kernels are source text loaded through `compiler.diskcache` like generated ones:
they compile on first use (about a second) and then come from tracejit's verified disk
cache, which ``TRACEJIT_CACHE=0`` / ``TRACEJIT_CACHE_DIR`` govern as for any kernel.
"""
from __future__ import annotations

import numpy as np

from ..compiler import diskcache
from ..threads import PARALLEL_MIN  # below it the serial kernel runs, as for fused groups

__all__ = ["adam_update"]

_SOURCE = '''\
# tracejit's fused Adam/AdamW update for {dtype}, {variant} (tracejit/optim/fused.py)
import numpy as np
from numba import njit, prange

# p, g (read only), m, v, vmax; then maximize, coupled_wd, decay, wd, lerp_small, w,
# one_minus_w, beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size
SIGNATURE = ("void({dtype}[::1], Array({dtype}, 1, 'C', readonly=True), {dtype}[::1], {dtype}[::1], "
             "{dtype}[::1], boolean, boolean, boolean, {dtype}, boolean, {dtype}, {dtype}, {dtype}, "
             "{dtype}, boolean, {dtype}, {dtype}, {dtype})")

_JIT = dict(cache=CACHE, nogil=True, error_model="numpy")


# inlined into the loop by numba (so nothing of its own to cache)
@njit(inline="always", nogil=True, error_model="numpy")
def _adam_element(pi, gi, mi, vi, vm, maximize, coupled_wd, decay, wd, lerp_small, w, one_minus_w,
                  beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size):
    # adam.Adam._update, one element at a time; the operation order is PyTorch's.
    if maximize:
        gi = -gi
    if decay:
        pi = pi * wd                       # AdamW: p *= 1 - lr * weight_decay
    elif coupled_wd:
        gi = gi + wd * pi                  # Adam: g = g + weight_decay * p
    if lerp_small:
        mi = mi + w * (gi - mi)
    else:
        mi = gi - (gi - mi) * one_minus_w
    vi = vi * beta2
    vi = vi + one_minus_beta2 * gi * gi
    vd = vi
    if amsgrad:
        vm = vm if (vm >= vi or vm != vm) else vi   # np.maximum: a nan wins
        vd = vm
    denom = np.sqrt(vd)
    denom = denom / bc2_sqrt
    denom = denom + eps
    upd = neg_step_size * mi
    upd = upd / denom
    return pi + upd, mi, vi, vm


@njit(SIGNATURE, parallel={parallel}, **_JIT)
def kernel(p, g, m, v, vmax, maximize, coupled_wd, decay, wd, lerp_small, w, one_minus_w,
           beta2, one_minus_beta2, amsgrad, bc2_sqrt, eps, neg_step_size):
    for i in {loop}(p.size):
        vm = vmax[i] if amsgrad else vmax[0]
        p[i], m[i], v[i], vm = _adam_element(p[i], g[i], m[i], v[i], vm, maximize, coupled_wd, decay, wd,
                                             lerp_small, w, one_minus_w, beta2, one_minus_beta2, amsgrad,
                                             bc2_sqrt, eps, neg_step_size)
        if amsgrad:
            vmax[i] = vm
'''

_modules: dict = {}


def _kernel(dtype: np.dtype, parallel: bool, wait: bool = True):
    """The kernel for `dtype` (float32 or float64), parallel or serial, compiled or loaded
    on first use: one module per variant, so only the variants a model uses compile.
    ``wait=False`` (background compile mode): None while a compile worker builds it."""
    module = _modules.get((dtype, parallel))
    if module is None:
        fill = {"{dtype}": dtype.name, "{parallel}": str(parallel), "{loop}": "prange" if parallel else "range",
                "{variant}": "parallel" if parallel else "serial"}
        source = _SOURCE
        for k, v in fill.items():
            source = source.replace(k, v)
        hint = f"adam_{dtype.name}_{fill['{variant}']}"
        if wait:
            module = diskcache.load_module(source, name_hint=hint)
        else:
            from ..compiler.tiers import module_when_ready
            module = module_when_ready(source, hint)
            if module is None:
                return None
        _modules[(dtype, parallel)] = module
    if parallel:
        from ..compiler.threadsafe import guard_parallel
        return guard_parallel(module.kernel)  # numba's workqueue layer aborts on concurrent launches
    return module.kernel


def adam_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None, *,
                maximize: bool, weight_decay: float, decoupled: bool, lr: float, w: float, beta2: float,
                bc2_sqrt: float, eps: float, step_size: float, wait: bool = True) -> bool:
    """One Adam/AdamW step, in place on C-contiguous float arrays of one dtype and shape.
    Returns False, changing nothing, when ``wait=False`` and the kernel is still compiling
    in the background (the caller runs the array path: same results).

    `vmax` is amsgrad's running maximum (None without amsgrad); `w` is the lerp weight
    ``1 - beta1``; `bc2_sqrt` is ``sqrt(1 - beta2**t)``; `step_size` is ``lr / (1 - beta1**t)``.
    """
    t = p.dtype.type
    decay = decoupled and weight_decay != 0
    coupled = not decoupled and weight_decay != 0
    wd = t(1 - lr * weight_decay) if decay else t(weight_decay)
    amsgrad = vmax is not None
    # without amsgrad only vmax[0] is read (and ignored), never written
    vm = vmax.reshape(-1) if amsgrad else p.reshape(-1)[:1]
    kernel = _kernel(p.dtype, p.size >= PARALLEL_MIN, wait)
    if kernel is None:
        return False
    kernel(p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1), vm, bool(maximize), coupled, decay,
           wd, abs(w) < 0.5, t(w), t(1 - w), t(beta2), t(1 - beta2), amsgrad, t(bc2_sqrt), t(eps), t(-step_size))
    return True
