"""Software prefetch for generated CPU kernels: ``prefetch_line(a, i)`` asks the cache for
the line holding ``a[i]`` ahead of the loads (what a flat blocked-sum kernel imports; the
policy, where and how far ahead, is codegen_cpu.PREFETCH_AHEAD_BYTES).

Why: on the 2-core Xeon VM the GELU loss kernel (4M float32: reads x, y, z, writes the
three gradients, sums the loss) moves its 96 MiB at the copy's rate and no faster; its
arithmetic is hidden (a kernel of the same arrays computing ``((x*y + z)**2).sum()`` takes
as long), and its working set sits in the last-level cache: a copy runs at ~57 GB/s with
32-64 MiB working sets and ~28 GB/s from 256 MiB on. There the time is the
latency of each stream's misses, and the hardware prefetcher restarts at every 4 KiB page:
the kernel reads three streams and writes three. Asking for the inputs one page (4 KiB)
ahead keeps those misses in flight across page boundaries. Measured (4M float32, two
threads, one process alternating variants, SCHED_FIFO so both cores are ours, 5-6 rounds
of 11 calls): min / median 1.916 / 2.014 ms without, 1.846 / 1.894 ms with the inputs
prefetched 4 KiB ahead into L1 (``prefetcht0``); 2 KiB ahead lost (1.977 / 2.101), 6-12
KiB ahead and ``prefetcht1`` gained less (1.866-1.886 / 1.946-1.958).

A prefetch is a hint: it never faults (a line past an array's end is never asked for
here anyway: the caller clips the range) and changes no value, so results keep their bits.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch_line"]

# llvm.prefetch(address, rw: 0 read, locality: 3 keep in all levels, cache: 1 data)
_READ, _LOCALITY, _DATA = 0, 3, 1


@intrinsic
def prefetch_line(typingctx, arr, idx):
    """Prefetch the cache line of element `idx` of the 1-D array `arr` for reading."""
    if not (isinstance(arr, types.Array) and isinstance(idx, types.Integer)):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        address = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8")
        builder.call(fn, [address, ir.Constant(i32, _READ), ir.Constant(i32, _LOCALITY), ir.Constant(i32, _DATA)])
        return context.get_dummy_value()
    return sig, codegen
