"""LLVM options that hold only while tracejit's own CPU kernels compile.

Why: a fused elementwise kernel such as the GELU chain is one long dependency chain per
element (loads, a dozen multiplies and adds, tanh's polynomials and a divide: about 70
cycles of latency per vector). LLVM's loop vectorizer gives such a loop one vector per
iteration, and the out-of-order core cannot overlap enough iterations to hide that
latency: measured here (4M float32, 2 threads) the GELU kernel took 2.35 ms, against
1.17 ms for an add of three arrays. Interleaving four vectors per iteration gives the
core four independent chains: 1.48 ms, with the same instructions per element.
Reductions gain too (four partial accumulators instead of one). But four copies of a
body that keeps many values live spill registers: the fused GELU forward+backward (three gradient
outputs and the loss sum in one pass) went from 2.97 to 4.79 ms. So the count follows
what a kernel stores per element (`kernel_options`), a proxy for its live values
measured on these kernels (ms, 4M float32, 2 threads; LLVM's choice / 2 / 4):

    GELU forward             1 store   2.12 / 1.70 / 1.48
    sigmoid(x) * y           1 store   1.97 / 1.38 / 1.25
    GELU backward, dx only   1 store   2.81 / 2.20 / 1.95
    sum((x - y)**2)          1 store   0.55 / 0.64 / 0.45
    exp(x)*y, exp(x)+y       2 stores  1.80 / 1.41 / 1.28
    GELU backward, dx dy dz  3 stores  3.59 / 3.01 / 3.17  (now 4: see MANY_STORES)
    the same and the loss    4 stores  2.97 / 2.97 / 4.79  (signed-index gathers then:
                                       with contiguous accesses 4 is now the faster,
                                       see `_FOUR_ALWAYS`)

How: numba has no per-function switch for this and never attaches loop metadata we
could set, so the option is LLVM's process-wide ``-force-vector-interleave``. It is set
only inside `applied`, which holds numba's global compiler lock (every numba compile in
the process takes it, so no other function can compile meanwhile) and restores LLVM's
default before releasing it: user code numba compiles is never affected. The options
are part of the disk cache key (`diskcache.load_module`), since they change the code.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["kernel_options", "applied"]

# Vectors interleaved per loop iteration: 4 for kernels storing up to MANY_STORES - 1
# values per element, 2 from there on (8 gained nothing over 4 on the GELU forward).
# Was 3: three-output maps (GELU backward dx, dy, dz) are faster with 4 too, in AVX-512
# and AVX2 code (4M float32, ms, 2 vectors -> 4: one thread 9.85 -> 9.29 / 9.82 -> 8.73,
# two threads 6.26 -> 5.60 / 6.22 -> 5.43 at load 1; notes/avx9-note.md).
MANY_STORES = 4


def kernel_options(stores: int, parallel: bool, form: str = "") -> tuple[str, ...]:
    """LLVM options for a CPU kernel that stores `stores` values per element (outputs,
    plus one for a reduction's accumulator), rendered in loop shape `form`
    (`codegen_cpu.loop_form`).

    Serial twins (small sizes, see plan.PARALLEL_MIN) keep LLVM's own choice: their
    loops are short, and the bigger body would add compile time (the GELU kernel's
    compile went from 0.33 to 0.44 s with 4) where a first call matters most.

    Column reductions ("column_blocks") and flat full reductions ("flat_blocked_sum",
    "flat_reduce") take 4 whatever they store (see `_FOUR_ALWAYS`). The MLP's
    LayerNorm+GELU backward groups (4 outputs and a column sum) took 538 / 739 us with 2
    and 413 / 615 us with 4 (one thread); the small column sums did not change, nor did row reductions with either count.
    """
    if not parallel:
        return ()
    if form in _FOUR_ALWAYS:
        return ("-force-vector-interleave=4",)
    return (f"-force-vector-interleave={4 if stores < MANY_STORES else 2}",)


# Loop shapes that take 4 whatever they store. Column reductions: their sums live in
# memory (a partial-sum row), not in registers. Flat full reductions (the GELU loss:
# dx, dy, dz and the loss sum in one pass): the "many stores -> 2" rule came from this
# kernel while its block loop still indexed with a signed int (gathers and scatters on
# AVX-512: hwlimit note), which made 4 copies of the body spill. With contiguous
# accesses 4 is faster on AVX-512 and AVX2 code alike: operands in cache, one thread,
# ns per element with 2 / 4 vectors: AVX-512 2.30 / 1.80, AVX2 (NUMBA_CPU_NAME=haswell)
# 2.56 / 2.10; 4M float32 11.5 / 10.3-10.8 ms (AVX-512; notes/avx9-note.md).
_FOUR_ALWAYS = ("column_blocks", "flat_blocked_sum", "flat_reduce")

# LLVM's own value for each option we set: restored after our compile.
_DEFAULTS = {"-force-vector-interleave": "0"}


def _name(option: str) -> str:
    name = option.split("=", 1)[0]
    if name not in _DEFAULTS:
        raise ValueError(f"llvmopts: no known default to restore for LLVM option {name!r}")
    return name


@contextlib.contextmanager
def applied(options: tuple[str, ...]) -> Iterator[None]:
    """Set the LLVM `options` for the numba compiles run inside the block, then reset them."""
    if not options:
        yield
        return
    names = [_name(o) for o in options]  # unknown options fail before anything is set
    import llvmlite.binding as ll
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        try:
            for option in options:
                ll.set_option("tracejit", option)
            yield
        finally:
            for name in names:
                ll.set_option("tracejit", f"{name}={_DEFAULTS[name]}")
