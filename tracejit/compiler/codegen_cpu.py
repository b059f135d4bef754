"""The numba CPU renderer: source of one fused group's kernel from its `loopnest.LoopNest`.

The source depends on the group's structure, dtypes, rank, broadcast pattern and operand
layouts, never on sizes (sizes are arguments, so a new batch size reuses the kernel).
Every kernel has a parallel variant (``prange``, chunked reductions) and a serial twin for
small sizes, both rendered from the same nest. Loop shapes:

- *flat*: one ``prange`` over the flat index, the vectorized case. Flat kernels take 1-D
  views and ``n`` whatever the rank (a ``reshape`` inside would make a cache-loading
  process import numba's arrayobj: 26-30 ms of a warm first call);
- *nested*: anything else: a loop nest over the iteration dims, kept dims outside (the
  first a ``prange``), reduced dims inside, explicit N-d indexing. A reduction over every
  dim but the last gets column blocks, one with a kept dim inside a reduced one loops in
  memory order; past ``MAX_NESTED_RANK`` dims the nest becomes flat loops that recover
  each index by division.

Reductions accumulate as `loopnest.accumulation` says and use ``fastmath={'reassoc'}`` to
vectorize; the elementwise work then sits in an ``element`` helper compiled without
fastmath and inlined by LLVM, since 'reassoc' would rewrite ``x - 0.5*x`` as ``0.5*x`` and
lose the nan of ``-inf - -inf``. Transcendentals come from `mathlib`; constants are typed
in the operation's dtype.
"""
from __future__ import annotations

from . import llvmopts
from .emitter import NUMBA_TYPE, Emitter, arr_type, fold, render_steps
from .loopnest import SUM_BLOCK, LoopNest, lower

__all__ = ["CpuEmitter", "Emitter", "render", "generate", "KernelSpec", "NUMBA_TYPE", "MAX_NESTED_RANK"]

_NP_NAME = {"bool": "bool_"}

# Deeper iteration spaces are walked by one flat loop with index division instead of a
# loop per dim (Python allows at most 20 nested blocks; numpy arrays have up to 64 dims).
MAX_NESTED_RANK = 12
IND = "    "
# Columns per task of a reduction over every dim but the last (`_leading_reduction`).
COLUMN_BLOCK = 4096
# Its row chunks: at most this many, and fewer where the partial sums (row chunks x
# columns) would pass PARTIAL_CAP elements.
ROW_CHUNKS = 8
PARTIAL_CAP = 1 << 20
# The comment line before the fold of a chunked reduction's partial results: where a
# chunk kernel (codegen_chunks.py) puts that fold under ``if chunk_fold:``.
FOLD_MARK = "# fold the chunks' partial results"


def column_partial_len(columns: int) -> int:
    """Elements a column reduction's ``partial`` needs at most for `columns` columns: what a
    chunk kernel's launcher allocates without knowing the row count."""
    return min(ROW_CHUNKS * columns, max(PARTIAL_CAP, columns))


def _np_type(dt: str) -> str:
    """Source naming numpy's scalar type for dtype name `dt` (``np.float32``, ``np.bool_``)."""
    return f"np.{_NP_NAME.get(dt, dt)}"


class CpuEmitter(Emitter):
    """numpy scalar types (``np.float32(...)``); math from `mathlib` or numba builtins."""

    def _type(self, dt: str) -> str:
        return _np_type(dt)

    def _call(self, fn: str, spec, args: tuple) -> str:
        if spec.cpu != "mathlib":
            return f"{spec.cpu}({', '.join(args)})"
        if not self.dtype.startswith("float"):
            raise NotImplementedError(f"{fn} on {self.dtype}")
        # Only the name: importing mathlib imports numba, which generating a kernel's
        # source (in a background compile: before any worker finished) need not pay.
        from .mathnames import function_name
        name = function_name(fn, self.dtype)
        self.imports.add(name)
        return f"{name}({', '.join(args)})"


class KernelSpec:
    """A rendered kernel: its source, its nest, and the LLVM options to compile it with."""

    chunked = False   # a chunk kernel (codegen_chunks.ChunkSpec) launched by cshares.ChunkKernel

    def __init__(self, source, nest: LoopNest, parallel: bool, form: str, llvm_options=()):
        self.source = source
        self.nest = nest
        self.name = nest.name
        self.mode = nest.mode         # "flat" (1-D operands and n) | "nested" (N-d and dims)
        self.parallel = parallel
        self.form = form              # the loop shape: see `loop_form`
        self.llvm_options = llvm_options  # set while numba compiles it (llvmopts.applied)


def loop_form(nest: LoopNest, parallel: bool) -> str:
    """Which loop shape renders `nest`: "map" (flat, no reduction), "flat_reduce",
    "flat_blocked_sum" (float32 sums in float32 blocks), "flat_serial_reduce", "nested_map", "column_blocks" (a reduction over
    every dim but the last), "outer_chunks" (a kept dim inside a reduced one), "rows"
    (other partial reductions), "strided_full" (a full reduction of nested operands), "deep" (rank above MAX_NESTED_RANK), "row_passes"
    (a rows nest: codegen_cpu_rows.py) or "windows" (codegen_cpu_windows.py)."""
    red = nest.reduction
    if nest.window is not None or channels(nest):
        return "windows"
    if nest.rows:
        return "row_passes"
    if nest.flat:
        if red is None:
            return "map"
        if not parallel:
            return "flat_serial_reduce"
        return "flat_blocked_sum" if red.block_dtype else "flat_reduce"
    if nest.rank > MAX_NESTED_RANK:
        return "deep"
    if red is None:
        return "nested_map"
    if red.indexed:
        return "rows"
    if red.leading:
        return "column_blocks"
    # (a short kept last dim stays "rows": its partial sums would be updated one by one)
    short = red.kept and red.kept[-1] == nest.rank - 1 and 0 < inner_extent(nest) < llvmopts.SHORT_LOOP
    if red.kept and red.dims[0] < red.kept[-1] and not short:
        return "outer_chunks"
    return "rows" if red.kept else "strided_full"


# ----------------------------------------------------------------------------- reductions


def _combine(red, acc: str, r: str) -> str:
    """The statement folding value `r` into `acc` (widened first where the sum is)."""
    if red.combine in ("add", "mul") and red.acc_dtype == "float64":
        r = f"np.float64({r})"
    return fold(red.combine, acc, r)


def _init(red) -> str:
    return CpuEmitter(red.acc_dtype).const(red.init(), red.acc_dtype)


def _cast_back(x: str, dtype: str) -> str:
    if dtype == "bool":
        return f"({x} != 0)"
    return f"{_np_type(dtype)}({x})"


def _fold_partials(count: str, red) -> list:
    """The end of a chunked full reduction: fold the `count` per-chunk results in
    ``partial`` into ``red[0]``."""
    return [f"{IND}{FOLD_MARK}",
            f"{IND}total = {_init(red)}",
            f"{IND}for c in range({count}):",
            f"{IND * 2}{_combine(red, 'total', 'partial[c]')}",
            f"{IND}red[0] = {_cast_back('total', red.out_dtype)}"]


# ----------------------------------------------------------------------------- rendering


def channels(nest: LoopNest) -> bool:
    """Whether `nest` is a rows nest over channels (its sums fold every dim but 1): the
    windows renderer's channel form (codegen_cpu_channels.py)."""
    return bool(nest.rows) and nest.rank == 4 and tuple(nest.rows[0].dims) == (0, 2, 3)


def render(nest: LoopNest, parallel: bool = True) -> KernelSpec:
    """The numba source of `nest`: the parallel variant, or (``parallel=False``) the serial
    twin for small sizes."""
    if nest.window is not None or channels(nest):
        from .codegen_cpu_windows import render_windows
        return render_windows(nest, parallel)
    if nest.rows:
        from .codegen_cpu_rows import render_rows
        return render_rows(nest, parallel)
    if nest.scatter is not None:
        from .codegen_cpu_loops import render_scatter
        return render_scatter(nest, parallel)
    rank = nest.rank
    red = nest.reduction
    form = loop_form(nest, parallel)
    loop = "prange" if parallel else "range"
    comp, emitters = render_steps(nest, CpuEmitter)
    imports = set().union(*(em.imports for em in emitters))
    helper: list = []
    if red is not None and parallel:
        # The elementwise work lives in a helper without fastmath, inlined by LLVM, so that
        # 'reassoc' on the reduction cannot turn -inf - -inf = nan into -inf (the serial
        # twin skips both: half the compile). No CPython wrapper: only the kernel calls it.
        ret = list(dict.fromkeys([o.value for o in nest.outputs] + [red.value]))
        ret_src = ", ".join(ret) + ("," if len(ret) == 1 else "")
        args_src = ", ".join(op.name for op in nest.operands)
        helper = ["@njit(cache=False, error_model='numpy', fastmath=False, no_cpython_wrapper=True)",
                  f"def element({args_src}):",
                  "    _always_inline()"] + ["    " + c for c in comp] + [f"    return {ret_src}", "", ""]
        comp = [f"{ret_src} = element({args_src})"]
        imports.add("_always_inline")

    sig = signature(nest, 1 if nest.flat else rank,
                    () if red is None else (arr_type(red.out_dtype, nest.red_rank, True),))
    fastmath = ', fastmath={"reassoc", "contract"}' if red is not None and parallel else ""
    header = [f"@njit({sig!r}, parallel={parallel}, cache=CACHE, error_model='numpy'{fastmath})",
              f"def {nest.name}({', '.join(nest.arguments())}):"]

    # Scalars (0-d operands, passed as 1-element arrays) are read once, outside the loops.
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    bits: set = set()   # float <-> integer key functions (mathbits) an argmax calls
    if nest.flat:
        body += _flat(nest, form, comp, loop)
    else:
        inner = [op.load for op in nest.operands if op.layout != "scalar"]
        inner += comp
        full_idx = ", ".join(f"i{d}" for d in range(rank)) or "0"
        inner += [f"{o.array}[{full_idx}] = {o.value}" for o in nest.outputs]
        if form == "deep":
            body += _decomposed_loops(nest, inner, loop)
        elif form == "column_blocks":
            body += _leading_reduction(nest, comp, loop)
        elif form == "outer_chunks":
            body += _outer_chunks(nest, inner, loop)
        elif red is not None and red.indexed:
            body += _arg_rows(nest, inner, loop, bits)
        else:
            body += _nested(nest, form, inner, loop)
    # (no group id: the source is the kernel's identity; see loopnest.lower)
    doc = [f'    """fused group: {nest.ops} ({nest.mode})"""']
    arrays = len(nest.outputs) + sum(op.layout != "scalar" for op in nest.operands)
    llvm_options = llvmopts.kernel_options(len(nest.outputs) + (red is not None), parallel, form,
                                           arrays=arrays, inner=0 if nest.flat else inner_extent(nest))
    src_lines = module_head(parallel, imports, llvm_options)
    if bits:
        src_lines.append(f"from tracejit.compiler.mathbits import {', '.join(sorted(bits))}")
    src_lines += ["", ""] + helper + header + doc + body
    return KernelSpec("\n".join(src_lines) + "\n", nest, parallel, form, llvm_options)


def signature(nest: LoopNest, out_rank: int | None, extra: tuple = ()) -> str:
    """A kernel's numba signature: its read-only operands, its outputs (of rank `out_rank`,
    None: each output's own), the array types `extra`, then the int64 sizes."""
    args = [arr_type(op.dtype, nest.arg_rank(op.k), op.contiguous, readonly=True) for op in nest.operands]
    args += [arr_type(o.dtype, len(o.var.aval.shape) if out_rank is None else out_rank, True)
             for o in nest.outputs]
    return f"void({', '.join(args + list(extra) + ['int64'] * len(nest.sizes))})"


def inner_extent(nest: LoopNest) -> int:
    """The static length of `nest`'s innermost loop, its last dim (0: symbolic or rank 0):
    what `llvmopts.kernel_options` sizes the vector loop by."""
    last = nest.shape[-1] if nest.shape else 0
    return last if isinstance(last, int) else 0


def module_head(parallel: bool, imports, llvm_options=()) -> list:
    """The first lines of a generated CPU kernel module: its origin, LLVM options, imports."""
    head = ["# generated by tracejit (CPU backend); sizes are arguments, never constants"]
    if llvm_options:
        head.append(f"# compiled with LLVM options: {' '.join(llvm_options)}")
    head += ["import math", "import numpy as np",
             "from numba import njit, prange" if parallel else "from numba import njit"]
    if imports:
        head.append(f"from tracejit.compiler.mathlib import {', '.join(sorted(imports))}")
    return head


def generate(group, layouts: tuple, name: str = "kernel", parallel: bool = True) -> KernelSpec:
    """`render` of `group`'s nest for input layouts `layouts` (see `loopnest.LAYOUTS`)."""
    return render(lower(group, layouts, name, sequential_sums=True), parallel)


def _flat(nest: LoopNest, form: str, comp: list, loop: str) -> list:
    """Loops of a flat nest."""
    red = nest.reduction

    def elem(ind, i):
        out = [f"{ind}{op.name} = {op.array}[{i}]" for op in nest.operands if op.layout == "flat"]
        out += [ind + c for c in comp]
        return out + [f"{ind}{o.array}[{i}] = {o.value}" for o in nest.outputs]
    if form == "map":
        return [f"{IND}for i in {loop}(n):"] + elem(IND * 2, "i")
    init, acc_np = _init(red), _np_type(red.acc_dtype)
    if form == "flat_serial_reduce":
        # The serial twin keeps one accumulator: no partials, half the compile time.
        return ([f"{IND}acc = {init}", f"{IND}for i in range(n):"] + elem(IND * 2, "i")
                + [f"{IND * 2}{_combine(red, 'acc', red.value)}",
                   f"{IND}red[0] = {_cast_back('acc', red.out_dtype)}"])
    if form == "flat_blocked_sum":
        # Sum float32 in float32 blocks of SUM_BLOCK, then the blocks in float64: widening
        # every element halves the vector width (2.5x slower); the error stays below numpy's
        # pairwise float32 sum. Block indices, as a stepped range kept LLVM from vectorizing.
        B = SUM_BLOCK
        body = [f"{IND}nb = (n + {B - 1}) // {B}",
                f"{IND}nchunk = min(64, max(1, nb // 16))",
                f"{IND}partial = np.empty(nchunk, {acc_np})",
                f"{IND}for c in {loop}(nchunk):",
                f"{IND * 2}acc = {init}",
                f"{IND * 2}for b in range(c * nb // nchunk, (c + 1) * nb // nchunk):",
                f"{IND * 3}bs = b * {B}",
                f"{IND * 3}be = min(bs + {B}, n)",
                f"{IND * 3}bacc = {_np_type(red.block_dtype)}(0.0)"]
        body += [f"{IND * 3}for i in range(bs, be):",
                # Unsigned index: with a possibly negative signed one LLVM vectorized this
                # loop with gathers and scatters on AVX-512, 3x slower
                f"{IND * 4}u = np.uintp(i)"]
        body += elem(IND * 4, "u")
        body += [f"{IND * 4}bacc += {red.value}",
                 f"{IND * 3}acc += {acc_np}(bacc)",
                 f"{IND * 2}partial[c] = acc"]
        return body + _fold_partials("nchunk", red)
    body = [f"{IND}nchunk = min(64, max(1, n // 4096))",
            f"{IND}partial = np.empty(nchunk, {acc_np})",
            f"{IND}for c in {loop}(nchunk):",
            f"{IND * 2}lo = c * n // nchunk",
            f"{IND * 2}hi = (c + 1) * n // nchunk",
            f"{IND * 2}acc = {init}",
            f"{IND * 2}for i in range(lo, hi):",
            f"{IND * 3}u = np.uintp(i)"]   # unsigned index, as in the blocked sum above
    body += elem(IND * 3, "u")
    body += [f"{IND * 3}{_combine(red, 'acc', red.value)}",
             f"{IND * 2}partial[c] = acc"]
    return body + _fold_partials("nchunk", red)


def _outer_loops(dims: list, loop: str, pair: bool) -> tuple:
    """The loops over `dims` (outermost first) and the depth inside them. Where `pair` holds,
    the parallel variant's loop runs over the first two dims as one index: over the first
    dim alone, a batch of 2 ran on two threads whatever the cores."""
    body, depth = [], 1
    if pair and loop == "prange":
        a, b = dims[0], dims[1]
        body = [f"{IND}for i{a}_{b} in prange(d{a} * d{b}):", f"{IND * 2}i{a} = i{a}_{b} // d{b}",
                f"{IND * 2}i{b} = i{a}_{b} - i{a} * d{b}"]
        dims, depth = dims[2:], 2
    for lvl, d in enumerate(dims):
        body.append(f"{IND * depth}for i{d} in {loop if lvl == 0 and depth == 1 else 'range'}(d{d}):")
        depth += 1
    return body, depth


def _nested(nest: LoopNest, form: str, inner: list, loop: str) -> list:
    red = nest.reduction
    body = []
    if form == "nested_map":
        body, depth = _outer_loops(list(range(nest.rank)), loop, nest.rank >= 3)
        return body + [IND * depth + s for s in inner]
    if form == "rows":
        body, d0 = _outer_loops(list(red.kept), loop, len(red.kept) >= 2)
        body.append(f"{IND * d0}acc = {_init(red)}")
        out_idx = ", ".join(f"i{d}" for d in red.kept)
        return body + _fold_loops(red, red.dims, d0, inner) + [
            f"{IND * d0}red[{out_idx}] = {_cast_back('acc', red.out_dtype)}"]
    # "strided_full": a full reduction over strided operands: partials per first-dim index.
    first = red.dims[0]
    body += [f"{IND}partial = np.empty(d{first}, {_np_type(red.acc_dtype)})",
             f"{IND}for i{first} in {loop}(d{first}):",
             f"{IND * 2}acc = {_init(red)}"]
    body += _fold_loops(red, red.dims[1:], 2, inner) + [f"{IND * 2}partial[i{first}] = acc"]
    return body + _fold_partials(f"d{first}", red)


def _fold_loops(red, dims, depth: int, inner: list) -> list:
    """Loops over `dims` from indent `depth` around `inner` and the fold into ``acc``."""
    body = [f"{IND * (depth + j)}for i{d} in range(d{d}):" for j, d in enumerate(dims)]
    depth += len(dims)
    body += [IND * depth + s for s in inner]
    return body + [f"{IND * depth}{_combine(red, 'acc', red.value)}"]


# the column-block reduction and the decomposed loops (a module of their own for length)
from .codegen_cpu_loops import _arg_rows, _decomposed_loops, _leading_reduction, _outer_chunks  # noqa: E402
