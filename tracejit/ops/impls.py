"""The implementation table: what a backend registers to run a primitive besides its
numpy form.

A primitive's record (ops/*) is its one definition. A backend adds speed without touching
it: per primitive and platform it registers an ordered list of (checker, implementation),
as JAX registers a lowering per primitive and platform. ``checker(*arrays, **params) ->
bool`` says whether the implementation takes a call; ``implementation(*arrays, **params)``
returns the result, or None to decline (its kernel is still loading), and the next entry
runs; nothing accepts: the numpy form runs. Every implementation computes the numpy form's
values (tests/ops/test_impls.py). An implementation may also pick, for one signature fixed
ahead of the calls, which call to make (``specialize(shapes, dtype, params)``).

Elementwise primitives share one implementation (`elementwise`, filled by
`install_elementwise`). `serving_tier0` and `standin` rank the kernels a call asks a
backend to load. Imports nothing of tracejit: backends fill it from above.
"""
from __future__ import annotations

import threading
from typing import Callable, NamedTuple, Optional

import numpy as np
from .. import bf16 as _bf16
from .ufunc_columns import columns as _columns

__all__ = ["Implementation", "register", "implementations", "registered", "specialized", "signature_call",
           "elementwise", "install_elementwise", "PLATFORMS", "serving_tier0", "outside", "standin",
           "standing_in"]

PLATFORMS = ("cpu", "cuda")


class Implementation(NamedTuple):
    """One registered implementation of a primitive on a platform."""
    name: str
    fn: Callable                          # fn(*arrays, **params) -> array, or None (declined)
    checker: Optional[Callable] = None    # checker(*arrays, **params) -> bool; None: every call
    specialize: Optional[Callable] = None  # specialize(shapes, dtype, params) -> fn(*arrays) | None


_TABLE: dict = {}    # (primitive, platform) -> tuple of Implementation


def register(prim, fn: Callable, *, checker: Optional[Callable] = None, name: str = "",
             platform: str = "cpu", specialize: Optional[Callable] = None) -> Implementation:
    """Add `fn` after the implementations `prim` has on `platform`; rebuild ``prim.run``."""
    if platform not in PLATFORMS:
        raise ValueError(f"register: unknown platform {platform!r} (known: {', '.join(PLATFORMS)})")
    if not callable(fn) or (checker is not None and not callable(checker)):
        raise TypeError(f"register: {prim.name}'s implementation and checker must be callable")
    impl = Implementation(name or getattr(fn, "__name__", "?"), fn, checker, specialize)
    _TABLE[(prim, platform)] = _TABLE.get((prim, platform), ()) + (impl,)
    prim.rebuild_run()
    return impl


def implementations(prim, platform: str = "cpu") -> tuple:
    """The implementations registered for `prim` on `platform`, in the order they are tried."""
    return _TABLE.get((prim, platform), ())


def registered() -> list:
    """Every (primitive, platform, Implementation) in the table."""
    return [(p, plat, impl) for (p, plat), impls in _TABLE.items() for impl in impls]


def numpy_form(prim, params: dict) -> Callable:
    """`prim`'s numpy form as a plan call for one signature's `params` (an implementation's
    `specialize` that declines a signature it never takes)."""
    impl = prim.impl
    return lambda *arrays: impl(np, *arrays, **params)


def specialized(prim, shapes: tuple, dtype, params: dict):
    """The call an eager plan makes for one CPU signature of `prim` (`Implementation.specialize`
    of its first implementation that has one), or None (the plan runs ``prim.run``)."""
    for impl in _TABLE.get((prim, "cpu"), ()):
        if impl.specialize is not None:
            return impl.specialize(shapes, dtype, params)
    return None


def signature_call(prim, shapes: tuple, dtype, params: dict):
    """The call a plan makes for one CPU signature of `prim` (eager's and compiled plans'):
    with registered implementations `specialized`'s, else the numpy form's ufunc or its
    record's ``extra["fast"]`` call for the signature (a ufunc over many short rows: a
    column at a time, ufunc_columns.py); None: ``prim.run`` per call."""
    if prim.has_impls:
        return specialized(prim, shapes, dtype, params) if prim.table_runs() else None
    if prim.ufunc is not None:
        return _columns(prim.ufunc, shapes) or prim.ufunc
    return prim.fast(shapes, dtype, params) if prim.fast is not None else None


def runner(prim) -> Callable:
    """``run(xp, *arrays, **params)``: the table's implementations for the platform of the
    array module `xp` (numpy: "cpu"), then the numpy form. The numpy form itself when no
    implementation is registered."""
    cpu = _TABLE.get((prim, "cpu"), ())
    gpu = _TABLE.get((prim, "cuda"), ())
    if not cpu and not gpu:
        return prim.impl

    def run(xp, *arrays, **params):
        for impl in (cpu if xp is np else gpu):
            check = impl.checker
            if check is None or check(*arrays, **params):
                out = impl.fn(*arrays, **params)
                if out is not None:
                    return out
        return prim.impl(xp, *arrays, **params)
    run.__name__ = run.__qualname__ = f"run_{prim.name}"
    return run


class ElementwiseKernels:
    """Large eager elementwise calls run by kernels made from the primitive's scalar rule:
    the slot a backend fills (`install_elementwise`). Until one does, every call runs the
    numpy form. The eager dispatcher (ops/eager.py) asks `eligible` once per signature
    and calls `run` per call; `run` returns None to leave a call to the numpy form."""

    def eligible(self, prim, operands, compute_dtype, out_dtype, out_shape, params=None) -> bool:
        return False

    def run(self, prim, arrays, params, compute_np, out_np, out_shape, out=None):
        return None

    def declines(self, prim, out_shape) -> bool:
        return True

    def add_into(self, dst, src) -> None:
        if dst.dtype == _bf16.STORAGE:
            _bf16.add_into(dst, src)
        else:
            np.add(dst, src, out=dst)

    def copy_of(self, src):
        return None


elementwise = ElementwiseKernels()

_ELEMENTWISE_CALLS = ("eligible", "run", "declines", "add_into", "copy_of")


def install_elementwise(provider) -> None:
    """Let `provider` (an object or module with `ElementwiseKernels`' functions) run large
    eager elementwise calls: its functions take the slot's (callers hold the slot)."""
    for name in _ELEMENTWISE_CALLS:
        fn = getattr(provider, name)
        if not callable(fn):
            raise TypeError(f"install_elementwise: {name} is not callable")
        setattr(elementwise, name, fn)


# ---------------------------------------------------------------- the context of a call
# Set while this thread runs a compiled function's tier-0 forward (compiler/tiers.Tier0):
# the ops' asks then serve tier 0 alone, which the function's own plan kernels end.
_tier0 = threading.local()


# How many threads are inside a `serving_tier0` block or saved-tensor hooks: autograd/node.py
# reads it at every recorded op (a list's item: cheaper than the thread-local when unused).
TIER0_THREADS = [0]
_tier0_count_lock = threading.Lock()


def count_tier0_thread(delta: int) -> None:
    """A thread enters (+1) or leaves (-1) a block whose recorded nodes are special."""
    with _tier0_count_lock:
        TIER0_THREADS[0] += delta


class serving_tier0:
    """``with impls.serving_tier0():`` around a tier-0 forward (compiler/tiers.Tier0) and
    the backward of the ops it recorded (autograd/node.py's `Tier0PrimNode`): an eager kernel
    asked for only inside such blocks is queued at rank LATER, behind the kernels the compiled
    step and the eager code around it ask for (see `outside`)."""

    def __enter__(self):
        depth = _tier0.depth = getattr(_tier0, "depth", 0) + 1
        if depth == 1:
            count_tier0_thread(1)
        return self

    def __exit__(self, *exc):
        _tier0.depth -= 1
        if not _tier0.depth:
            count_tier0_thread(-1)
        return False


def outside() -> bool:
    """Whether the calling thread is outside every tier-0 forward (`serving_tier0`) and every
    stand-in for a fused kernel still on its way (`standing_in`): an elementwise kernel
    asked for only inside those serves tier 0, whose plan fuses it into kernels of its own,
    so it should not queue ahead of the kernels the compiled step waits for. Not for the
    hand-written kernels, which a plan may call as the eager op does."""
    return not (getattr(_tier0, "depth", 0) or getattr(_tier0, "standin", 0))


def standing_in() -> bool:
    """Whether the calling thread runs the stand-in of a fused kernel not loaded yet (`standin`)."""
    return bool(getattr(_tier0, "standin", 0))


class standin:
    """``with impls.standin():`` around the composition a fused hand-written kernel stands
    for while that kernel is still compiling: the kernels it asks for queue as tier 0's do
    (`outside` is False), behind those the compiled step keeps asking for."""

    def __enter__(self):
        _tier0.standin = getattr(_tier0, "standin", 0) + 1
        return self

    def __exit__(self, *exc):
        _tier0.standin -= 1
        return False
