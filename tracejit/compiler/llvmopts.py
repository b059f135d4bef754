"""LLVM options that hold only while tracejit's own CPU kernels compile.

Why: a fused elementwise kernel is one long dependency chain per element, and LLVM gives
such a loop one vector per iteration, too few to hide the latency; interleaving four gives
four independent chains (GELU on two threads: ~30% less time). The count follows what a
kernel stores per element (`kernel_options`), a proxy for its live values.

How: numba has no per-function switch, so this is LLVM's process-wide
``-force-vector-interleave``, set only inside `applied`, which holds numba's compiler lock
and restores the default before releasing it: user code is never affected. The options
are part of the disk cache key.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator

__all__ = ["kernel_options", "applied"]

# Vectors interleaved per loop iteration: 4 for kernels storing up to MANY_STORES - 1
# values per element, 2 from there on (8 gained nothing over 4).
MANY_STORES = 4


def kernel_options(stores: int, parallel: bool, form: str = "", arrays: int = 0,
                   inner: int = 0) -> tuple[str, ...]:
    """LLVM options for a CPU kernel that stores `stores` values per element, rendered in
    loop shape `form`, over `arrays` array operands (0: unknown), its innermost loop
    `inner` long where the shape says so (0: unknown or long). A loop needing more
    runtime alias checks than LLVM allows gets `MANY_CHECKS`. Serial twins keep LLVM's own
    interleave (compile time matters most there), and so do loops shorter than
    `SHORT_LOOP`; `_FOUR_ALWAYS` shapes take 4."""
    checks = MANY_CHECKS if _alias_checks(stores, arrays) > _DEFAULT_CHECKS else ()
    if not parallel or 0 < inner < SHORT_LOOP:
        return SHORT_TAILS + checks
    if form in _FOUR_ALWAYS:
        return ("-force-vector-interleave=4",) + WIDE_VECTORS + SHORT_TAILS + checks
    return (f"-force-vector-interleave={4 if stores < MANY_STORES else 2}",) + WIDE_VECTORS + SHORT_TAILS + checks


# A loop vectorized one vector per iteration gets no vector epilogue by LLVM's default (it
# wants 16 lanes in the main loop), so a short inner loop, a row of 12 B-spline bases or
# a 13-long slice, would run its tail scalar; this gives the tail a narrower vector loop
# (a nested kernel over (256, 128, 12) rows on AVX2: 0.7 ns an element, scalar tails 2.0).
SHORT_TAILS = ("-epilogue-vectorization-minimum-VF=8",)

# Innermost loops shorter than this (a static last dim) keep one vector per iteration:
# four interleaved 8-lane vectors are 32 elements, a length such a loop never reaches, so
# every element would run scalar (the B-spline recursion over 256x128x13: 0.87 ms, 1.45
# interleaved).
SHORT_LOOP = 32


# LLVM vectorizes a loop over possibly overlapping arrays only behind runtime checks and
# gives up past 128 of them (numba's arrays carry no noalias): an LSTM backward group with
# 217 checks took 297 us scalar against 81 us.
_DEFAULT_CHECKS = 128
MANY_CHECKS = ("-vectorize-memory-check-threshold=1024",)


def _alias_checks(stores: int, arrays: int) -> int:
    """The runtime alias checks a loop writing `stores` of its `arrays` arrays needs: each
    written array against every other array (a pair of read-only ones needs none)."""
    if arrays <= 1 or stores <= 0:
        return 0
    stores = min(stores, arrays)
    return stores * (stores - 1) // 2 + stores * (arrays - stores)


# Vector width for parallel kernels: LLVM's tuning for AVX-512 cores prefers 256-bit
# vectors; this lets it use 512-bit ones (GELU forward: ~14% less time). It pays only on
# 64-byte-aligned arrays, so large outputs are placed on lines (memory.placed_empty).
WIDE_VECTORS = ("prefer-vector-width=512",)


# Loop shapes that take 4 whatever they store: column reductions keep their sums in memory,
# and flat full reductions ran faster at 4 on AVX-512 and AVX2 alike.
_FOUR_ALWAYS = ("column_blocks", "flat_blocked_sum", "flat_reduce")

# LLVM's own value for each option we set: restored after our compile.
_DEFAULTS = {"-force-vector-interleave": "0", "-vectorize-memory-check-threshold": "128",
             "-epilogue-vectorization-minimum-VF": "16"}

# Function attributes (options written without a leading "-": ``name=value``) that
# `applied` sets on the kernel's own functions, and only those (`_OURS`).
_ATTRIBUTES = ("prefer-vector-width",)

# Names of the functions a kernel compile defines that are the kernel's own (its module's
# and the parfor bodies numba outlines); numba's own helpers keep their attributes.
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
    attributes `attrs` before LLVM optimizes them, by wrapping
    ``CPUCodeLibrary.add_ir_module`` for the block (numba has no hook there; the caller
    holds numba's compiler lock). `_Attributes` adds the string attributes llvmlite lacks."""
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
