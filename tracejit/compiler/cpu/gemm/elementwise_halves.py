"""Elementwise arithmetic in two halves on two cores: ``a + b``, ``a - b``, ``a * b``,
``a / b`` split by flat halves, each half a numba cfunc of compiler/cpu/gemm/halves.py's module.

Why: the two-layer step's SGD update (``w1 -= lr * g1``: two 100K-element ops) follows the
weight gradient's product halves (halves.py), which left each half of w1 on its own core and
OpenBLAS's worker still spinning: the update split the same way runs on those cores at once
(a pair of 100K-element halves ran in 8.0 us against numpy's 11.4, launch included), where
a numba parallel kernel's launch cost more than the half of the loop it saves.

What: `binary` runs one op on arrays of one shape or an array and a scalar (float32 or
float64, C-contiguous, from `EW_MIN_ELEMENTS`), IEEE operations by flat halves: bitwise
numpy's. `plan_calls` is the same launch for a registry plan with only the checks a call
can change. Both run only within `halves.WARM_S` of a launch of halves (the worker still
spinning), with the pair loaded and two threads by the pool; otherwise None and numpy's
loop runs. The launch machinery and its state (the loaded pairs, the warm window, the
switch) are halves.py's, read from there at each call.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..runtime import sharepool
from . import halves

__all__ = ["binary", "plan_calls", "EW_MIN_ELEMENTS"]

# Elementwise ops below this many elements stay on numpy's loop (64K float32: ~5 us on one
# core; a pair of 100K-element halves ran in 8.0 us against numpy's 11.4, launch included).
EW_MIN_ELEMENTS = 1 << 16

_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3}


def plan_calls(name: str, compute_np: np.dtype, general: Callable, general_into: Callable) -> tuple:
    """One eager signature's ``x <op> y`` as a launch of two halves with only the checks a
    call can change: ``(call(x, y) -> array, into(x, y, out) -> bool)`` for a registry plan
    that `binary` serves (compiler/cpu/kernels/vectorized.py `plan_calls`: op `name` of add, sub, mul, div;
    operands arrays of `compute_np` of the result's shape, or Python floats; no cast).

    `binary` and `launch` check what a plan fixes once (the op, the dtype, which operand is
    a scalar, the size) at every call, and the dispatcher types `ew_launch`'s ten arguments:
    ~4 us of the 100K-element ``lr * g`` and ``w -= t`` of the two-layer step's update, on
    top of a ~6 us launch. Here a call checks the warm window, the switch, the policy's
    count, the loaded pair and the operands' layout, then runs the same launch (the same
    records and halves: bitwise `binary`'s results) through `ew_launch`'s compiled entry.
    Anything else goes to `general(x, y)` (the plan's path before: `binary`, then numpy's
    loop) or `general_into(x, y, out)` (registry's `_kernel_into`), so the two answer
    exactly as that path would. halves.py's state (`_pairs`, `on()`, `_warm_until`, the
    pool's count) is read at each call: tests and the policy change it under a plan."""
    op = _OPS[name]
    t = halves._NAMES[compute_np]
    ndarray = np.ndarray
    perf_counter = time.perf_counter
    empty = np.empty
    may_share = _may_share_memory

    def ready():
        # the launch's preconditions that are not the operands': the pair, or None
        if perf_counter() > halves._warm_until or not halves.on():
            return None
        p = halves._pairs.get(t)
        if p is None or not p.pthread or sharepool.pool_threads() < 2:
            return None
        return p

    def operands(x, y):
        # (flat x, flat y, xs, ys, s) as `binary` passes them, or None: an array of the
        # compute dtype, C-contiguous, from EW_MIN_ELEMENTS, and an array of its shape or
        # a float
        if type(x) is ndarray:
            arr = x
            if type(y) is ndarray:
                if y.dtype is not compute_np or y.shape != x.shape or not y.flags.c_contiguous:
                    return None
            elif type(y) is not float:
                return None
        elif type(x) is float and type(y) is ndarray:
            arr = y
        else:
            return None
        if arr.dtype is not compute_np or not arr.flags.c_contiguous or arr.size < EW_MIN_ELEMENTS:
            return None
        if arr is x:
            xf = x.reshape(-1)
            if type(y) is float:
                return xf, xf, 0, 1, y
            return xf, y.reshape(-1), 0, 0, 0.0
        yf = y.reshape(-1)
        return yf, yf, 1, 0, x

    def run(p, args, of) -> bool:
        if not sharepool.try_launch():
            return False
        try:
            xf, yf, xs, ys, s = args
            p.ew_entry(p.recs, op, xf, yf, of, xs, ys, s, p.pthread, p.ew_address)
        finally:
            sharepool.end_launch()
        halves._warm_until = perf_counter() + halves.WARM_S
        return True

    def call(x, y):
        # the step's ``lr * g``: a float, then an array (written out: every line here runs
        # on caches the step's products swept, where a Python call costs ~0.3 us)
        if type(x) is float and type(y) is ndarray and perf_counter() <= halves._warm_until and halves.on():
            p = halves._pairs.get(t)
            if (p is not None and p.pthread and y.dtype is compute_np and y.flags.c_contiguous
                    and y.size >= EW_MIN_ELEMENTS and sharepool.pool_threads() >= 2):
                out = empty(y.shape, compute_np)
                if sharepool.try_launch():    # (read here: a fork makes a new lock)
                    try:
                        yf = y.reshape(-1)
                        p.ew_entry(p.recs, op, yf, yf, out.reshape(-1), 1, 0, x, p.pthread, p.ew_address)
                    finally:
                        sharepool.end_launch()
                    halves._warm_until = perf_counter() + halves.WARM_S
                    return out
            return general(x, y)
        p = ready()
        if p is not None:
            args = operands(x, y)
            if args is not None:
                out = empty((x if args[2] == 0 else y).shape, compute_np)
                if run(p, args, out.reshape(-1)):
                    return out
        return general(x, y)

    def into(x, y, out) -> bool:
        if x is out and type(y) is ndarray and perf_counter() <= halves._warm_until and halves.on():
            # the step's ``w -= t`` (written out, as `call`'s float case)
            p = halves._pairs.get(t)
            if (p is not None and p.pthread and type(out) is ndarray and out.dtype is compute_np
                    and y.dtype is compute_np and y.shape == out.shape and out.size >= EW_MIN_ELEMENTS
                    and out.flags.c_contiguous and y.flags.c_contiguous and not may_share(y, out)
                    and sharepool.pool_threads() >= 2 and sharepool.try_launch()):
                try:
                    of = out.reshape(-1)
                    p.ew_entry(p.recs, op, of, y.reshape(-1), of, 0, 0, 0.0, p.pthread, p.ew_address)
                finally:
                    sharepool.end_launch()
                halves._warm_until = perf_counter() + halves.WARM_S
                return True
            return general_into(x, y, out)
        p = ready()
        if p is not None and type(out) is ndarray and out.dtype is compute_np and out.flags.c_contiguous:
            args = operands(x, y)
            # (an operand other than `out` itself that shares its memory: `general_into`
            # decides, as before)
            if (args is not None and out.shape == (x if args[2] == 0 else y).shape
                    and (x is out or type(x) is not ndarray or not may_share(x, out))
                    and (y is out or type(y) is not ndarray or not may_share(y, out))):
                if run(p, args, out.reshape(-1)):
                    return True
        return general_into(x, y, out)

    return call, into

# numpy's C function itself where it is reachable (np.may_share_memory goes through the
# __array_function__ dispatch first)
try:
    from numpy._core._multiarray_umath import may_share_memory as _may_share_memory
except ImportError:     # (another numpy's layout)
    _may_share_memory = np.may_share_memory


def binary(name: str, x, y, compute_np: np.dtype, out: np.ndarray | None = None) -> np.ndarray | None:
    """``x <op> y`` for op `name` (add, sub, mul, div) in two flat halves, into `out` (a
    C-contiguous array of the result's shape and dtype, which may be x or y) or a new
    array; None where it does not run (another op, dtype or layout: numpy's loop runs).
    x and y: arrays of `compute_np`, C-contiguous, of the result's shape, or numbers
    (taken as `compute_np`, as numpy takes a Python scalar).

    The Python here is most of a launch's cost inside a training step, where the caches
    are cold (a 100K-element ``lr * g`` in the two-layer step: the launch 8 us, this
    function's checks 4 us, the op's dispatch 3 us): so the checks are few
    and each once. Halves run only within WARM_S of a launch (`_warm_until`), which found
    the machine able to (`two_cores`: BLAS's ceiling, OpenBLAS's worker); here the loaded
    pair and the policy's count (`sharepool.pool_threads`, read at every call: it may drop
    at any sample) suffice."""
    if time.perf_counter() > halves._warm_until:
        return None
    op = _OPS.get(name)
    t = halves._NAMES.get(compute_np)
    if op is None or t is None:
        return None
    xa = type(x) is np.ndarray and x.ndim > 0
    ya = type(y) is np.ndarray and y.ndim > 0
    arr = x if xa else y if ya else None
    if arr is None or (arr.dtype is not compute_np and arr.dtype != compute_np) or not arr.flags.c_contiguous:
        return None
    if xa and ya and (y.shape != x.shape or (y.dtype is not compute_np and y.dtype != compute_np)
                      or not y.flags.c_contiguous):
        return None
    if arr.size < EW_MIN_ELEMENTS:
        return None
    p = halves._pairs.get(t)
    if p is None:
        p = halves._pair(compute_np)       # (loads it where it may run)
        if p is None:
            return None
    elif not halves.on() or sharepool.pool_threads() < 2:
        return None
    if not p.pthread:               # (no gotoblas_pthread to call: never jump to address 0)
        return None
    flat = arr.reshape(-1)
    if out is None:
        out = np.empty(arr.shape, compute_np)
        of = out.reshape(-1)
    elif out is arr:
        of = flat
    elif out.shape != arr.shape or out.dtype != compute_np or not out.flags.c_contiguous:
        return None
    else:
        of = out.reshape(-1)
    if xa and ya:
        s = 0.0
        xf, yf = (flat, y.reshape(-1)) if arr is x else (x.reshape(-1), flat)
    else:
        # the scalar as numpy takes it (`compute_np`): a float's rounding to float32 happens
        # in the half, from its float64 bits, as np.float32(y) rounds it
        s = x if xa is False else y
        if type(s) is not float:
            s = float(compute_np.type(s))
        xf = yf = flat
    if not halves.launch(p, p.ew_launch, op, xf, yf, of, int(not xa), int(not ya), s, p.pthread,
                         p.ew_address):
        return None
    return out
