"""LLVM options that hold only while tracejit's own CPU kernels compile.

Why: a fused elementwise kernel such as the GELU chain is one long dependency chain per
element, and LLVM's vectorizer gives such a loop one vector per iteration, too few for
the out-of-order core to hide the latency. Interleaving four vectors gives it four
independent chains (the 4M float32 GELU kernel on two threads: 2.12 -> 1.48 ms), and
reductions get four partial accumulators. Four copies of a body that keeps many values
live spill registers, so the count follows what a kernel stores per element
(`kernel_options`), a proxy for its live values.

How: numba has no per-function switch for this and never attaches loop metadata we
could set, so the option is LLVM's process-wide ``-force-vector-interleave``. It is set
only inside `applied`, which holds numba's global compiler lock (no other function can
compile meanwhile) and restores LLVM's default before releasing it: user code numba
compiles is never affected. The options are part of the disk cache key, since they
change the code.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator

__all__ = ["kernel_options", "applied"]

# Vectors interleaved per loop iteration: 4 for kernels storing up to MANY_STORES - 1
# values per element, 2 from there on (8 gained nothing over 4).
MANY_STORES = 4


def kernel_options(stores: int, parallel: bool, form: str = "", arrays: int = 0) -> tuple[str, ...]:
    """LLVM options for a CPU kernel that stores `stores` values per element (outputs,
    plus one for a reduction's accumulator), rendered in loop shape `form`
    (`codegen_cpu.loop_form`), over `arrays` array operands in all (inputs and outputs;
    0: unknown). A kernel whose loop needs more runtime alias checks than LLVM's vectorizer
    allows by default gets `MANY_CHECKS` (serial twins too), see `_alias_checks`.

    Serial twins (small sizes, see plan.PARALLEL_MIN) keep LLVM's own choice: their loops
    are short, and a bigger body adds compile time where a first call matters most.
    Column reductions and flat full reductions take 4 whatever they store (`_FOUR_ALWAYS`).
    """
    checks = MANY_CHECKS if _alias_checks(stores, arrays) > _DEFAULT_CHECKS else ()
    if not parallel:
        return checks
    if form in _FOUR_ALWAYS:
        return ("-force-vector-interleave=4",) + WIDE_VECTORS + checks
    return (f"-force-vector-interleave={4 if stores < MANY_STORES else 2}",) + WIDE_VECTORS + checks


# LLVM vectorizes a loop over arrays that may overlap only behind runtime checks, one per
# pair of arrays at least one of which it writes, and gives up past
# ``-vectorize-memory-check-threshold`` (128) of them: numba's arrays carry no noalias, so
# a fused group with many outputs ran scalar (an LSTM backward group, 217 checks: 297 us
# against 81 us with the checks allowed).
_DEFAULT_CHECKS = 128
MANY_CHECKS = ("-vectorize-memory-check-threshold=1024",)


def _alias_checks(stores: int, arrays: int) -> int:
    """The runtime alias checks a loop writing `stores` of its `arrays` arrays needs: each
    written array against every other array (a pair of read-only ones needs none)."""
    if arrays <= 1 or stores <= 0:
        return 0
    stores = min(stores, arrays)
    return stores * (stores - 1) // 2 + stores * (arrays - stores)


# Vector width for parallel kernels: LLVM's tuning for Intel AVX-512 cores prefers 256-bit
# vectors; this function attribute lets the vectorizer use 512-bit ones (nothing changes on
# AVX2). On two threads the GELU kernels are compute-bound, and 512-bit vectors do the
# arithmetic in fewer instructions (4M float32 forward: 1.37 -> 1.18 ms). It pays only on
# 64-byte-aligned arrays (a 512-bit access of a misaligned one splits across two lines):
# large kernel outputs are placed on lines (memory.placed_empty).
WIDE_VECTORS = ("prefer-vector-width=512",)


# Loop shapes that take 4 whatever they store. Column reductions: their sums live in
# memory (a partial-sum row), not in registers. Flat full reductions (the GELU loss: three
# gradients and the loss sum in one pass): with contiguous accesses 4 is faster than 2 on
# AVX-512 and AVX2 code alike (AVX-512, one thread: 1.80 against 2.30 ns per element).
_FOUR_ALWAYS = ("column_blocks", "flat_blocked_sum", "flat_reduce")

# LLVM's own value for each option we set: restored after our compile.
_DEFAULTS = {"-force-vector-interleave": "0", "-vectorize-memory-check-threshold": "128"}

# Function attributes (options written without a leading "-": ``name=value``) that
# `applied` sets on the kernel's own functions, and only those (`_OURS`).
_ATTRIBUTES = ("prefer-vector-width",)

# Names of the functions a kernel compile defines that are the kernel's own: its module's
# (generated modules live under diskcache's "tracejit_kernels" package) and the parfor
# bodies numba outlines from its prange loops (named "<dynamic>.__numba_parfor_gufunc_...").
# numba's own helpers compiled for the first time inside the block (an ``ol_min`` impl, NRT)
# are linked into user code later: they keep their attributes untouched.
_OURS = ("tracejit_kernels", "__numba_parfor_gufunc_")


def _name(option: str) -> str:
    name = option.split("=", 1)[0]
    if name not in _DEFAULTS and name not in _ATTRIBUTES:
        raise ValueError(f"llvmopts: no known default to restore for LLVM option {name!r}")
    return name


@contextlib.contextmanager
def applied(options: tuple[str, ...]) -> Iterator[None]:
    """Set the LLVM `options` for the numba compiles run inside the block, then reset them."""
    if not options:
        yield
        return
    names = [_name(o) for o in options]  # unknown options fail before anything is set
    flags = [o for o in options if o.startswith("-")]
    attrs = tuple(tuple(o.split("=", 1)) for o in options if not o.startswith("-"))
    import llvmlite.binding as ll
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        try:
            for option in flags:
                ll.set_option("tracejit", option)
            with _function_attributes(attrs):
                yield
        finally:
            for name in names:
                if name in _DEFAULTS:
                    ll.set_option("tracejit", f"{name}={_DEFAULTS[name]}")


@contextlib.contextmanager
def _function_attributes(attrs: tuple[tuple[str, ...], ...]) -> Iterator[None]:
    """Give the functions of tracejit's kernels compiled inside the block the string
    attributes `attrs` ((name, value) pairs), before LLVM optimizes them.

    How: numba has no hook between lowering a function and optimizing it, so
    ``CPUCodeLibrary.add_ir_module`` (where a lowered module enters LLVM) is wrapped for
    the block's duration; the caller holds numba's compiler lock, so only our compiles
    pass through it. llvmlite.ir models only LLVM's enum attributes: `_Attributes` adds
    the string ones to what a function's prototype prints (`_attributes_class`).
    """
    if not attrs:
        yield
        return
    from numba.core import codegen

    cls = codegen.CPUCodeLibrary
    plain = cls.__dict__["add_ir_module"]
    attributes = _attributes_class()

    def add_ir_module(self, ir_module):
        for fn in ir_module.functions:
            if fn.blocks and any(mark in fn.name for mark in _OURS):
                fn.attributes = attributes(fn.attributes, attrs)
        return plain(self, ir_module)

    cls.add_ir_module = add_ir_module
    try:
        yield
    finally:
        cls.add_ir_module = plain


@functools.lru_cache(maxsize=None)
def _attributes_class():
    from llvmlite.ir.values import FunctionAttributes

    class _Attributes(FunctionAttributes):
        """A function's llvmlite.ir attributes plus LLVM string attributes ("name"="value")."""

        def __init__(self, base: FunctionAttributes, strings: tuple[tuple[str, ...], ...]):
            super().__init__(base)
            self.alignstack = base.alignstack
            self.personality = base.personality
            self.strings = strings

        def __bool__(self) -> bool:  # printed even with no enum attribute
            return True

        def _to_list(self, ret_type):
            return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in self.strings]

    return _Attributes
