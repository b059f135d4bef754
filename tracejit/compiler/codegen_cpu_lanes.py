"""A rows nest rendered *in lanes*: many rows at once, the innermost loop across rows.

Why: a rows kernel walks each row in its own loops, the reductions folded along the row.
A short row (10 logits) is shorter than one vector, so every pass is a tail loop plus a
horizontal fold per row (softmax over (8192, 4): the rows body took 2x the lanes' time,
log_softmax 4.7x). In lanes the passes run over tiles of `LANES` rows: for each element
index along the row, one loop across the tile's rows, each row's accumulator one lane of
a vector. Rows in memory order are copied into element-major tile buffers first, so those
loops read and write contiguous memory. Per-row values live in arrays of one slot per
row; a row's result does not depend on the tiling or the thread count.

The same body serves a reduction over a middle dim (`swap`): the operands are stored
(A, R, B) for the nest's iteration shape (A, B, R), so the loop across lanes (B) reads
contiguous memory in place, with no transposed copy (softmax over dim 1 of
(32, 64, 128)). `lanes_body` gives the lines, `render_lanes` a kernel of them alone.
"""
from __future__ import annotations

import re

from .loopnest import SUM_BLOCK, LoopNest
from .rowpasses import schedule

__all__ = ["LANES", "LANE_ROW_MAX", "LANE_ROWS_MIN", "takes_lanes", "short_rows_lanes", "lanes_body",
           "render_lanes", "lane_condition"]

IND = "    "
LANES = 64          # rows per tile: each per-row array slot of a tile stays in L1
# Rows up to this long run in lanes inside the rows kernels (softmax over rows of 10:
# lanes 0.7x the rows body's time, of 16: 1.3x).
LANE_ROW_MAX = 12
# ...where the dim across which the lanes run has at least this many rows
LANE_ROWS_MIN = 8

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*,?\s*(?:\+|-|\*)?=(?!=)")
_NAME = re.compile(r"[A-Za-z_]\w*")


def takes_lanes(nest: LoopNest) -> bool:
    """Whether `nest` may be rendered in lanes: rank 2 or more, no sums over the rows, no
    bf16 operands, row reductions that fold per lane (sums, float max and min)."""
    if nest.rank < 2 or nest.cols or not nest.rows:
        return False
    # (bf16 operands are words the rows renderer widens on load: its tile buffers have no
    # numpy dtype for them)
    if any(o.dtype == "bfloat16" for o in list(nest.operands) + list(nest.outputs)):
        return False
    return all(r.combine in ("add", "max", "min") and not r.k for r in nest.rows)


def short_rows_lanes(nest: LoopNest, parallel: bool) -> bool:
    """Whether the rows kernel of `nest` gets a lanes body for short rows: its serial
    variant (the parallel one keeps one row loop, which the chunk kernels split), where a
    row folds a float max or min (a horizontal fold of integer keys per row, which lanes
    avoid). Sums alone fold well per row: log_softmax's backward over rows of 10 ran 1.6x
    slower in lanes."""
    from .codegen_cpu_rows import split_nan
    return not parallel and takes_lanes(nest) and any(split_nan(r) for r in nest.rows)


def lane_condition(nest: LoopNest) -> str:
    """The runtime test under which a rows kernel runs its lanes body (short rows, enough
    rows across the lane dim)."""
    last = nest.rank - 1
    return f"d{last} <= {LANE_ROW_MAX} and d{last - 1} >= {LANE_ROWS_MIN}"


def _swapped(entries: list, swap: bool) -> str:
    if swap and len(entries) >= 2:
        entries = entries[:-2] + [entries[-1], entries[-2]]
    return ", ".join(entries)


def lanes_body(nest: LoopNest, block, parallel: bool, swap: bool, ind: str = IND) -> list:
    """The kernel body (indented by `ind`) running `nest` in lanes across dim ``rank - 2``
    (`block`: codegen_cpu_rows.inliner's). `swap`: the arrays hold the last two iteration
    dims swapped (a reduction over a middle dim)."""
    from .codegen_cpu import _cast_back, _combine, _init, _np_type
    from .codegen_cpu_rows import _KEYS, _key_fold, _key_result, split_nan
    from .emitter import unflatten

    sched = schedule(nest)
    rank = nest.rank
    last, lane = rank - 1, rank - 2
    later_row = sched.row_names(nest)
    dtypes: dict = {}    # per-row name -> its dtype: each gets an array of one slot per row
    for op in sched.row_loads:
        dtypes[op.name] = op.dtype
    for st in [st for p in sched.passes for st in p.before] + list(sched.after):
        dtypes[st.name] = st.dtype
    for k, red in enumerate(nest.rows):
        dtypes[f"r{k}"] = red.out_dtype
        if split_nan(red):
            it = _KEYS[red.acc_dtype][0]
            dtypes[f"hi{k}"] = dtypes[f"lo{k}"] = it
        else:
            dtypes[f"acc{k}"] = red.acc_dtype
            if red.block_dtype:
                dtypes[f"blk{k}"] = red.block_dtype

    def sub(op_entries: str) -> str:
        return _swapped(op_entries.split(", "), swap)

    full = sub(", ".join(f"i{d}" for d in range(rank)))
    row_idx = sub(", ".join([f"i{d}" for d in range(last)] + ["0"]))
    defined: set = set()

    def per_lane(lines: list, depth: str) -> list:
        """`lines` inside the loop across the tile's rows, the per-row names they read
        loaded from their slots and those they set stored back."""
        text = "\n".join(lines)
        used = {n for n in _NAME.findall(text) if n in dtypes}
        set_here = []
        for ln in lines:
            m = _ASSIGN.match(ln)
            if m:
                set_here += [n.strip() for n in m.group(1).split(",") if n.strip() in dtypes]
        loads = [f"{depth}{IND}{n} = _{n}[q]" for n in sorted(used & defined)]
        stores = [f"{depth}{IND}_{n}[q] = {n}" for n in dict.fromkeys(set_here)]
        defined.update(set_here)
        # (unsigned indices: numba wraps a possibly negative one, and the wrap keeps the
        # loop from vectorizing)
        return ([f"{depth}for lq in range(ta, tb):", f"{depth}{IND}i{lane} = np.uintp(lq)",
                 f"{depth}{IND}q = np.uintp(base + lq)"] + ([f"{depth}{IND}j = np.uintp(lq - ta)"] if tiled else [])
                + loads + [depth + IND + ln.lstrip() for ln in lines]
                + stores)

    # Rows in memory order (not `swap`): each tile's elements are copied into tile buffers
    # (`t_in<k>`, `t_out<m>`), element-major, so the loops across lanes read and write
    # contiguous memory (reading the rows in place strides by the row: 1.6-3x the rows
    # kernel's time over rows of 10)
    t_ins = [op for op in nest.operands if not swap and op.layout != "scalar" and not any(op.offset or ())
             and lane in op.index and last in op.index]
    t_outs = [o for o in nest.outputs if not (swap or o.row or o.col or o.cm)]
    tiled_names = {op.array for op in t_ins} | {o.array for o in t_outs}

    def load(op) -> str:
        if op.array in tiled_names:
            return f"{op.name} = t_{op.array}[i{last}, j]"
        return f"{op.name} = {op.array}[{sub(op.subscript())}]"

    def elem(o) -> str:
        return f"t_{o.array}[i{last}, j]" if o.array in tiled_names else f"{o.array}[{full}]"

    tiled = bool(tiled_names)
    I1, I2 = ind, ind + IND
    outer = " * ".join(f"d{d}" for d in range(lane)) or "1"
    body = [f"{I1}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    body += [f"{I1}nouter = {outer}", f"{I1}ntile = (d{lane} + {LANES - 1}) // {LANES}",
             f"{I1}nslots = nouter * d{lane}"]
    body += [f"{I1}_{n} = np.empty(nslots, {_np_type(dt)})" for n, dt in dtypes.items()]
    body += [f"{I1}for t in {'prange' if parallel else 'range'}(nouter * ntile):",
             f"{I2}o = t // ntile", f"{I2}ta = (t - o * ntile) * {LANES}",
             f"{I2}tb = min(ta + {LANES}, d{lane})", f"{I2}base = o * d{lane}"]
    body += unflatten("o", list(range(lane)), I2)
    for op in t_ins:
        body += [f"{I2}t_{op.array} = np.empty((d{last}, {LANES}), {_np_type(op.dtype)})",
                 f"{I2}for lq in range(ta, tb):", f"{I2}{IND}i{lane} = np.uintp(lq)",
                 f"{I2}{IND}j = np.uintp(lq - ta)", f"{I2}{IND}for i{last} in range(d{last}):",
                 f"{I2}{IND * 2}t_{op.array}[i{last}, j] = {op.array}[{sub(op.subscript())}]"]
    body += [f"{I2}t_{o.array} = np.empty((d{last}, {LANES}), {_np_type(o.dtype)})" for o in t_outs]
    loads = [f"{op.name} = {op.array}[{sub(op.subscript())}]" for op in sched.row_loads if op.layout != "scalar"]
    if loads:
        body += per_lane(loads, I2)
    for p in sched.passes:
        head = block(p.before, later_row, "")
        for k in p.folds:
            red = nest.rows[k]
            if split_nan(red):
                it, _, _, _, _, ninf, pinf = _KEYS[red.acc_dtype]
                head += [f"hi{k} = np.{it}({ninf})", f"lo{k} = np.{it}({pinf})"]
            else:
                head.append(f"acc{k} = {_init(red)}")
                if red.block_dtype:
                    head.append(f"blk{k} = {_np_type(red.block_dtype)}(0.0)")
        if head:
            body += per_lane(head, I2)
        inner = [load(op) for op in p.loads]
        inner += [f"{name} = {elem(o)}" for o, name in p.restore]
        want = [nest.rows[k].value for k in p.folds] + [o.value for o in p.writes] + [n for _, n in p.stash]
        inner += block(p.steps, want, "")
        inner += [f"{elem(o)} = {name}" for o, name in p.stash]
        for k in p.folds:
            red = nest.rows[k]
            if split_nan(red):
                inner += [ln.strip() for ln in _key_fold(k, red, red.value, "")]
            elif red.block_dtype:
                inner.append(f"blk{k} += {red.value}")
            else:
                inner.append(_combine(red, f"acc{k}", red.value))
        inner += [f"{elem(o)} = {o.value}" for o in p.writes if (o, o.value) not in p.restore]
        body.append(f"{I2}for i{last} in range(d{last}):")
        body += per_lane(inner, I2 + IND)
        # float32 sums: SUM_BLOCK elements a lane in float32, then each block into the
        # wide accumulator, as the rows kernels (the lanes stay float32 wide)
        flush = [ln for k in p.folds if nest.rows[k].block_dtype
                 for ln in (f"acc{k} += {_np_type(nest.rows[k].acc_dtype)}(blk{k})",
                            f"blk{k} = {_np_type(nest.rows[k].block_dtype)}(0.0)")]
        if flush:
            body.append(f"{I2}{IND}if (i{last} + 1) % {SUM_BLOCK} == 0 or i{last} + 1 == d{last}:")
            body += per_lane(flush, I2 + IND * 2)
        tail = []
        for k in p.folds:
            red = nest.rows[k]
            tail.append(f"r{k} = {_key_result(k, red) if split_nan(red) else _cast_back(f'acc{k}', red.out_dtype)}")
        if tail:
            body += per_lane(tail, I2)
    end = block(sched.after, [o.value for o in sched.row_writes], "")
    end += [f"{o.array}[{row_idx}] = {o.value}" for o in sched.row_writes]
    if end:
        body += per_lane(end, I2)
    for o in t_outs:
        body += [f"{I2}for lq in range(ta, tb):", f"{I2}{IND}i{lane} = np.uintp(lq)",
                 f"{I2}{IND}j = np.uintp(lq - ta)", f"{I2}{IND}for i{last} in range(d{last}):",
                 f"{I2}{IND * 2}{o.array}[{full}] = t_{o.array}[i{last}, j]"]
    return body


def render_lanes(nest: LoopNest, parallel: bool):
    """A kernel of `nest` in lanes alone, its arrays holding the last two iteration dims
    swapped: ``name(*operands, *outputs, d0, .., d{rank-1})`` over iteration shape
    (A, B, R) reducing R, for arrays stored (A, R, B)."""
    from . import llvmopts
    from .codegen_cpu import KernelSpec, CpuEmitter, module_head, signature
    from .codegen_cpu_rows import inliner

    if not takes_lanes(nest):
        raise ValueError(f"{nest.name}: this rows nest does not run in lanes")
    imports, helpers, block = inliner(nest, CpuEmitter)
    body = lanes_body(nest, block, parallel, swap=True)
    bits = sorted({fn for fn in ("_f2i", "_i2f", "_d2i", "_i2d") if any(fn + "(" in ln for ln in body)})
    header = [f"@njit({signature(nest, nest.rank)!r}, parallel={parallel}, cache=CACHE, error_model='numpy')",
              f"def {nest.name}({', '.join(nest.arguments())}):",
              f'    """fused group: {nest.ops} (lanes over a middle dim)"""']
    llvm_options = llvmopts.kernel_options(len(nest.outputs), parallel, "row_passes", inner=0)
    src = module_head(parallel, imports, llvm_options)
    if bits:
        src.append(f"from tracejit.compiler.mathbits import {', '.join(bits)}")
    src += ["", ""] + [ln for h in helpers for ln in h] + header + body
    return KernelSpec("\n".join(src) + "\n", nest, parallel, "row_passes", llvm_options)
