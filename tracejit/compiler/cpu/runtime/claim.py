"""Shares that take chunks of work from a shared counter instead of a fixed stripe.

`claim(counter)` is an atomic fetch-and-add on ``counter[0]`` (an int64 array the launch
allocates, zeroed): each call returns the next unclaimed chunk index, so every chunk goes to
exactly one share. A share that starts late (its thread waits for a core: another process,
or OpenBLAS's worker still spinning after a product) then takes fewer chunks and the others
take more, where a fixed stripe (share t of n: chunks t, t + n, ...) made the launch wait for
the late share's whole stripe. Results do not change with it wherever each chunk's work is
the same whoever runs it (elementwise updates such as fused Adam's).

Written as LLVM IR (numba has no atomics for CPU code): ``atomicrmw add`` with monotonic
ordering, enough for a counter whose only job is to hand out indices; the launch's own
join orders the chunks' data.

`arrive(counter)` is the same add with acquire-release ordering, for shares that count
themselves out: the share that sees the others' count has also seen their writes (a
folded reduction's last share folds the partials: compiler/cpu/runtime/cshares.py).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["claim", "arrive"]


def _fetch_add(counter, ordering: str):
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1):
        return None
    sig = types.int64(counter)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", data, ir.Constant(ir.IntType(64), 1), ordering)
    return sig, codegen


@intrinsic
def claim(typingctx, counter):
    """``counter[0]`` before adding 1 to it, atomically (`counter`: a 1-D int64 array)."""
    return _fetch_add(counter, "monotonic")


@intrinsic
def arrive(typingctx, counter):
    """`claim` with acquire-release ordering: the writes of every share that arrived
    before are visible to the one that reads their count."""
    return _fetch_add(counter, "acq_rel")
