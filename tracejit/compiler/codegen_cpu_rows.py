"""The numba CPU renderer of a rows nest (loopnest.py, rowpasses.py): one loop over the
rows (``prange`` in the parallel variant), and inside it the nest's passes over the row.

The leading dims are one flat row index, split per row, so attention scores spread over
every thread whatever the batch. Operands are read with N-d indexing, last index
innermost, so the inner loops vectorize. A nest with column sums (`LoopNest.cols`) walks
the rows in blocks of `COL_ROWS`, each folding into a partial row added in block order at
the end, so both variants give the same bits.

Both variants compile with ``fastmath={'reassoc', 'contract'}`` so the folds vectorize,
with the elementwise work in helpers compiled without it and inlined by LLVM, keeping inf
and nan exact. The serial twin differs only in its ``range`` over the rows (a plain serial
function's folds stay scalar: cross-entropy over 256x10, ~1.5x a call's time);
`runs_parallel` picks one by the call's work.
"""
from __future__ import annotations

from ..threads import WAKE_WORK, parallel_work, parallel_work_min, thread_ceiling
from . import llvmopts
from .emitter import render_steps, unflatten
from .loopnest import SUM_BLOCK, LoopNest
from .rowpasses import schedule

__all__ = ["render_rows", "inline_block", "runs_parallel", "parallel_work", "parallel_work_min", "parallel_elements_min",
           "WAKE_WORK"]

IND = "    "

# Rows per partial row of a rows nest's sums over its rows (`LoopNest.cols`): float32 sums
# run this many rows in float32, then add in float64 across blocks.
COL_ROWS = 64


def runs_parallel(nest: LoopNest, elements: int, threads: int = 0) -> bool:
    """Whether a call of rows `nest` over `elements` elements runs the parallel variant."""
    return parallel_work(elements * len(schedule(nest).passes), threads)


def parallel_elements_min(nest: LoopNest, threads: int = 0) -> int:
    """The element count from which calls of rows `nest` run the parallel variant: the
    `runs_parallel` rule as a threshold (a compiled plan's test of its sizes), for the
    threads this process may use, not the count the load policy holds now: a plan outlives
    the load it was made under, and its source (cached on disk) and the variants it
    compiles must be those of the next process."""
    threads = threads or thread_ceiling()
    passes = len(schedule(nest).passes)
    return -(-parallel_work_min(threads) // passes)


def split_nan(red) -> bool:
    """Whether float max/min fold on integer keys (`_KEYS`): the nan-winning float fold is
    no reduction LLVM vectorizes, but a float's bits ``b ^ ((b >> 31) & 0x7fffffff)`` order
    as the floats do and fold as integers, and a nan's key lies beyond the infinities' so
    the extreme keys tell whether one was there (softmax max pass: ~3x faster)."""
    return red.combine in ("max", "min") and red.acc_dtype.startswith("float")


# per float dtype: (integer type, sign shift, magnitude mask, float -> bits, bits -> float,
# key of -inf, key of +inf)
_KEYS = {"float32": ("int32", 31, "0x7fffffff", "_f2i", "_i2f", -2139095041, 2139095040),
         "float64": ("int64", 63, "0x7fffffffffffffff", "_d2i", "_i2d",
                     -9218868437227405313, 9218868437227405312)}


def _key(bits: str, dt: str) -> str:
    it, sh, mask = _KEYS[dt][:3]
    return f"({bits} ^ (({bits} >> np.{it}({sh})) & np.{it}({mask})))"


def _key_fold(k: int, red, value: str, ind: str) -> list:
    """The fold of `value` into row reduction `k`'s two keys (module's `split_nan`)."""
    it, _, _, f2i = _KEYS[red.acc_dtype][:4]
    key = _key(f"b{k}", red.acc_dtype)
    return [f"{ind}b{k} = {f2i}({value})", f"{ind}key{k} = {key}",
            f"{ind}hi{k} = key{k} if key{k} > hi{k} else hi{k}",
            f"{ind}lo{k} = key{k} if key{k} < lo{k} else lo{k}"]


def _key_result(k: int, red) -> str:
    """Row reduction `k`'s value from its keys: nan where a key lies beyond an infinity."""
    it, _, _, _, i2f, ninf, pinf = _KEYS[red.acc_dtype]
    dt = red.acc_dtype
    pick = f"hi{k}" if red.combine == "max" else f"lo{k}"
    val = f"{i2f}({_key(pick, dt)})"
    return f"np.{dt}(np.nan) if (hi{k} > np.{it}({pinf}) or lo{k} < np.{it}({ninf})) else {val}"


def render_rows(nest: LoopNest, parallel: bool):
    from .codegen_cpu import (CpuEmitter, KernelSpec, _cast_back, _combine, _init, _np_type,
                              inner_extent, module_head, signature)

    sched = schedule(nest)
    rank = nest.rank
    last = rank - 1
    imports, helpers, block = inliner(nest, CpuEmitter)
    bits: set = set()   # mathbits' bit casts the key folds call

    # per-row names later code reads: everything computed per row stays in scope
    later_row = sched.row_names(nest)
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    nrows = " * ".join(f"d{d}" for d in range(last)) or "1"
    loop = "prange" if parallel else "range"
    body += [f"{IND}nrows = {nrows}"]
    I2, I3 = IND * 2, IND * 3
    col_outs = [o for o in nest.outputs if o.col]
    if nest.cols:
        # column sums: each block of COL_ROWS rows folds into its own partial row, the
        # blocks added in order at the end (independent of variant and thread count)
        pdt = _np_type(nest.cols[0].block_dtype or nest.cols[0].acc_dtype)
        body += [f"{IND}nblk = (nrows + {COL_ROWS - 1}) // {COL_ROWS}",
                 f"{IND}partial = np.empty(({len(nest.cols)}, nblk, d{last}), {pdt})",
                 f"{IND}for blk in {loop}(nblk):"]
        body += [f"{I2}for i{last} in range(d{last}):"]
        body += [f"{I3}partial[{k}, blk, i{last}] = 0" for k in range(len(nest.cols))]
        body += [f"{I2}for row in range(blk * {COL_ROWS}, min(nrows, blk * {COL_ROWS} + {COL_ROWS})):"]
        I2, I3 = IND * 3, IND * 4
    else:
        body += [f"{IND}for row in {loop}(nrows):"]
    body += unflatten("row", list(range(last)), I2)
    body += [f"{I2}{op.load}" for op in sched.row_loads if op.layout != "scalar"]
    for p in sched.passes:
        body += block(p.before, later_row, I2)
        for k in p.folds:
            if not split_nan(nest.rows[k]):
                body.append(f"{I2}acc{k} = {_init(nest.rows[k])}")
            else:
                it, _, _, _, _, ninf, pinf = _KEYS[nest.rows[k].acc_dtype]
                body += [f"{I2}hi{k} = np.{it}({ninf})", f"{I2}lo{k} = np.{it}({pinf})"]
                bits.update(_KEYS[nest.rows[k].acc_dtype][3:5])
        # float32 sums fold SUM_BLOCK elements in float32, then each block in float64
        # (loopnest.Reduction.block_dtype: the vector lanes stay float32 wide)
        blocked = [k for k in p.folds if nest.rows[k].block_dtype]
        I = I3
        if blocked:
            I = I3 + IND
            body += [f"{I2}for b in range((d{last} + {SUM_BLOCK - 1}) // {SUM_BLOCK}):",
                     f"{I3}bs = b * {SUM_BLOCK}", f"{I3}be = min(bs + {SUM_BLOCK}, d{last})"]
            body += [f"{I3}blk{k} = {_np_type(nest.rows[k].block_dtype)}(0.0)" for k in blocked]
            # an unsigned index: numba wraps a possibly negative one (see codegen_cpu)
            body += [f"{I3}for ib in range(bs, be):", f"{I}i{last} = np.uintp(ib)"]
        else:
            body.append(f"{I2}for i{last} in range(d{last}):")
        body += [f"{I}{op.load}" for op in p.loads]
        full = ", ".join(f"i{d}" for d in range(rank))
        body += [f"{I}{name} = {o.array}[{full}]" for o, name in p.restore]
        want = ([nest.rows[k].value for k in p.folds] + [o.value for o in p.writes] + [n for _, n in p.stash]
                + [nest.cols[k].value for k in p.cols])
        body += block(p.steps, want, I)
        body += [f"{I}{o.array}[{full}] = {name}" for o, name in p.stash]
        for k in p.folds:
            red = nest.rows[k]
            if split_nan(red):
                body += _key_fold(k, red, red.value, I)
            elif k in blocked:
                body.append(f"{I}blk{k} += {red.value}")
            else:
                body.append(f"{I}{_combine(red, f'acc{k}', red.value)}")
        body += [f"{I}{o.array}[{full}] = {o.value}" for o in p.writes if (o, o.value) not in p.restore]
        body += [f"{I}partial[{k}, blk, i{last}] += {nest.cols[k].value}" for k in p.cols]
        body += [f"{I3}acc{k} += {_np_type(nest.rows[k].acc_dtype)}(blk{k})" for k in blocked]
        for k in p.folds:
            red = nest.rows[k]
            r = _cast_back(f'acc{k}', red.out_dtype)
            if split_nan(red):
                r = _key_result(k, red)
            body.append(f"{I2}r{k} = {r}")
    body += block(sched.after, [o.value for o in sched.row_writes], I2)
    row_idx = ", ".join([f"i{d}" for d in range(last)] + ["0"])
    body += [f"{I2}{o.array}[{row_idx}] = {o.value}" for o in sched.row_writes]
    if nest.cols:
        adt = _np_type(nest.cols[0].acc_dtype)
        J2, J3 = IND * 2, IND * 3
        body += [f"{IND}tot = np.empty(d{last}, {adt})"]
        for o in col_outs:
            k = int(o.value[1:])
            idx = ", ".join(["0"] * last + ["j"])
            body += [f"{IND}for j in range(d{last}):", f"{J2}tot[j] = 0",
                     f"{IND}for jb in range(nblk):", f"{J2}for j in range(d{last}):",
                     f"{J3}tot[j] += {adt}(partial[{k}, jb, j])",
                     f"{IND}for j in range(d{last}):",
                     f"{J2}{o.array}[{idx}] = {_cast_back('tot[j]', nest.cols[k].out_dtype)}"]

    from .codegen_cpu_lanes import lane_condition, lanes_body, short_rows_lanes
    if short_rows_lanes(nest, parallel):   # short rows: many at once, one a vector lane
        body = ([f"{IND}if {lane_condition(nest)}:"] + lanes_body(nest, block, parallel, False, IND * 2)
                + [f"{IND * 2}return"] + body)
    sig = signature(nest, rank)
    fastmath = ', fastmath={"reassoc", "contract"}'
    header = [f"@njit({sig!r}, parallel={parallel}, cache=CACHE, error_model='numpy'{fastmath})",
              f"def {nest.name}({', '.join(nest.arguments())}):",
              f'    """fused group: {nest.ops} (rows, {len(sched.passes)} passes)"""']
    # (a float64 row sum: the serial twin's options in both. Under reassoc the interleave
    # count decides how the sum is split into partial sums, so the twins must share it to
    # give the same bits, and the serial one's are eager's)
    wide = parallel and not any(r.acc_dtype == "float64" and not r.block_dtype for r in nest.rows)
    llvm_options = llvmopts.kernel_options(len(nest.outputs), wide, "row_passes", inner=inner_extent(nest))
    src = module_head(parallel, imports, llvm_options)
    if bits:
        src.append(f"from tracejit.compiler.mathbits import {', '.join(sorted(bits))}")
    src += ["", ""] + [ln for h in helpers for ln in h]
    src += header + body
    return KernelSpec("\n".join(src) + "\n", nest, parallel, "row_passes", llvm_options)


def inliner(nest: LoopNest, emitter_cls) -> tuple:
    """(imports, helpers, block): the imports and `inline_block` helpers of `nest`'s steps,
    and ``block(steps, want, ind)``, their `inline_block` lines."""
    lines, emitters = render_steps(nest, emitter_cls)
    src_of = {st.name: ln for st, ln in zip(nest.steps, lines)}
    imports = set().union(*(em.imports for em in emitters))
    helpers: list = []

    def block(steps, want, ind: str) -> list:
        return inline_block(steps, want, ind, src_of, helpers, imports)
    return imports, helpers, block


def inline_block(steps, want, ind: str, src_of: dict, helpers: list, imports: set) -> list:
    """Lines computing `steps` (those of `want` they define, else the last step's) through
    a call of a helper compiled without fastmath and inlined by LLVM; its source joins
    `helpers`."""
    if not steps:
        return []
    defined = {st.name for st in steps}
    args = []
    for st in steps:
        for a in st.args:
            if isinstance(a, str) and a not in defined and a not in args:
                args.append(a)
    # in the steps' order, never `want`'s (a set's order changes between processes, and with
    # it the source: the disk cache would miss in every new process)
    wanted = set(want)
    ret = [st.name for st in steps if st.name in wanted] or [steps[-1].name]
    h = f"h{len(helpers)}"
    ret_src = ", ".join(ret) + ("," if len(ret) == 1 else "")
    helpers.append(["@njit(cache=False, error_model='numpy', fastmath=False, no_cpython_wrapper=True)",
                    f"def {h}({', '.join(args)}):", f"{IND}_always_inline()"]
                   + [IND + src_of[st.name] for st in steps] + [f"{IND}return {ret_src}", "", ""])
    imports.add("_always_inline")
    return [f"{ind}{ret_src} = {h}({', '.join(args)})"]
