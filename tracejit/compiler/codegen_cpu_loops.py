"""codegen_cpu.py's loops for four nest shapes: a reduction over every dim but the last (column
blocks, `_leading_reduction`), one keeping a dim inside a reduced one (`_outer_chunks`), a
nest past ``MAX_NESTED_RANK`` (flat loops whose indices are recovered by division,
`_decomposed_loops`) and an argmax/argmin or topk over the last dim (`_arg_rows`, `_top_rows`).
codegen_cpu's `render` calls them; its module docstring describes the forms."""
from __future__ import annotations

from dataclasses import replace

from .codegen_cpu import (COLUMN_BLOCK, FOLD_MARK, IND, PARTIAL_CAP, ROW_CHUNKS, _cast_back, _combine,
                          _fold_loops, _fold_partials, _init, _np_type, _outer_loops)
from .emitter import fold, unflatten
from .loopnest import ARG_BLOCK, SUM_BLOCK, LoopNest

__all__: list = []   # (codegen_cpu's helpers)


def _leading_reduction(nest: LoopNest, comp: list, loop: str) -> list:
    """Loops for a reduction over every dim but the last (a bias gradient). Kept-outer loops
    read columns with the row stride and do not vectorize; instead the rows are split into a
    few chunks and the columns into blocks of 4096, each task sweeping its rows as 1-D
    slices from 0 (vectorizable) into its own row of ``partial``, folded at the end. The
    chunk count depends on sizes only, never on threads, so results do not either."""
    red = nest.reduction
    last = nest.rank - 1
    rows = list(range(last))
    init, acc_np = _init(red), _np_type(red.acc_dtype)
    # The partial sums are one flat array (row chunk rc's columns at rc * d_last), each
    # task setting its own slice first; a chunk kernel gets it from its launcher.
    body = [f"{IND}nblk = (d{last} + {COLUMN_BLOCK - 1}) // {COLUMN_BLOCK}",
            f"{IND}nrc = max(1, min({ROW_CHUNKS}, d0, {PARTIAL_CAP} // max(d{last}, 1)))",
            f"{IND}partial = np.empty(nrc * d{last}, {acc_np})",
            f"{IND}for task in {loop}(nrc * nblk):",
            f"{IND * 2}rc = task // nblk",
            f"{IND * 2}lo = (task % nblk) * {COLUMN_BLOCK}",
            f"{IND * 2}hi = min(lo + {COLUMN_BLOCK}, d{last})",
            f"{IND * 2}n = hi - lo",
            f"{IND * 2}accb = partial[rc * d{last} + lo:rc * d{last} + hi]",
            f"{IND * 2}for j in range(n):",
            f"{IND * 3}accb[j] = {init}"]
    # Operands that do not depend on the row loops are sliced once per task.
    per_block, per_row, per_elem = [], [], []
    for op in nest.operands:
        if op.layout == "scalar":
            continue
        parts = ["0" if d is None else f"i{d}" for d in op.index]
        row_dep = any(d is not None and d in rows for d in op.index[:-1])
        if op.index and op.index[-1] == last:
            sl = ", ".join(parts[:-1] + ["lo:hi"])
            (per_row if row_dep else per_block).append(f"r{op.k} = {op.array}[{sl}]")
            per_elem.append(f"{op.name} = r{op.k}[j]")
        else:        # broadcast along the last dim: one value per row
            (per_row if row_dep else per_block).append(f"{op.name} = {op.array}[{', '.join(parts)}]")
    body += [IND * 2 + line for line in per_block]
    if red.block_dtype is not None and len(rows) == 1:      # `_column_rows`' float32 blocks
        body.append(f"{IND * 2}bacc = np.empty(n, {_np_type(red.block_dtype)})")
    body += _column_rows(nest, red, comp, per_row, per_elem, 2)
    body += [f"{IND}{FOLD_MARK}",
             f"{IND}for j in range(d{last}):",
             f"{IND * 2}total = {init}",
             f"{IND * 2}for c in range(nrc):",
             f"{IND * 3}{_combine(red, 'total', f'partial[c * d{last} + j]')}",
             f"{IND * 2}red[j] = {_cast_back('total', red.out_dtype)}"]
    return body


def _outer_chunks(nest: LoopNest, inner: list, loop: str) -> list:
    """Loops for a partial reduction with a kept dim inside a reduced one: BatchNorm's sums
    of an (N, C, L) value over N and L, a mean over L of (N, L, C). Kept dims outside, as the
    "rows" form walks them, read the reduced dims apart (1.5 ms against 0.8 over (256, 80,
    50)); instead each task walks its part in memory order into its own row of ``partial``.
    Kept dims before the first reduced one are the tasks; else the first dim is split into
    a few chunks, the first kept dim too where the chunks are few, and their rows folded at
    the end. The chunk counts depend on sizes only, so results do not depend on threads."""
    red = nest.reduction
    init, acc_np = _init(red), _np_type(red.acc_dtype)
    first = red.dims[0]
    lead, kept = list(range(first)), [d for d in red.kept if d > first]
    body = [f"{IND}nk = {' * '.join(f'd{d}' for d in kept)}"]
    if lead:
        row = "i0"
        for d in lead[1:]:
            row = f"({row}) * d{d} + i{d}"
        body += [f"{IND}partial = np.empty({' * '.join(f'd{d}' for d in lead)} * nk, {acc_np})"]
        loops, depth = _outer_loops(lead, loop, len(lead) >= 2)
        body += loops
        body += [f"{IND * depth}base = ({row}) * nk",
                 f"{IND * depth}for j in range(base, base + nk):",
                 f"{IND * (depth + 1)}partial[j] = {init}"]
        body += _walk(nest, inner, kept, first, depth, None)
        body += [f"{IND * depth}for kf in range(nk):"]
        body += unflatten("kf", kept, IND * (depth + 1))
        idx = ", ".join(f"i{d}" for d in red.kept)
        return body + [f"{IND * (depth + 1)}red[{idx}] = {_cast_back('partial[base + kf]', red.out_dtype)}"]
    k1 = kept[0]
    inner_kept = " * ".join(f"d{d}" for d in kept[1:]) or "1"
    body += [f"{IND}nrc = max(1, min({ROW_CHUNKS}, d0, {PARTIAL_CAP} // max(nk, 1)))",
             f"{IND}nkb = max(1, min(d{k1}, {ROW_CHUNKS} // nrc))",
             f"{IND}partial = np.empty(nrc * nk, {acc_np})",
             f"{IND}for task in {loop}(nrc * nkb):",
             f"{IND * 2}rc = task // nkb",
             f"{IND * 2}klo = (task % nkb) * d{k1} // nkb",
             f"{IND * 2}khi = (task % nkb + 1) * d{k1} // nkb",
             f"{IND * 2}base = rc * nk",
             f"{IND * 2}for j in range(base + klo * {inner_kept}, base + khi * {inner_kept}):",
             f"{IND * 3}partial[j] = {init}",
             f"{IND * 2}for i0 in range(rc * d0 // nrc, (rc + 1) * d0 // nrc):"]
    body += _walk(nest, inner, kept, 1, 3, k1)
    body += [f"{IND}{FOLD_MARK}",
             f"{IND}for kf in range(nk):"]
    body += unflatten("kf", kept, IND * 2)
    body += [f"{IND * 2}total = {init}",
             f"{IND * 2}for c in range(nrc):",
             f"{IND * 3}{_combine(red, 'total', 'partial[c * nk + kf]')}",
             f"{IND * 2}red[{', '.join(f'i{d}' for d in kept)}] = {_cast_back('total', red.out_dtype)}"]
    return body


def _walk(nest: LoopNest, inner: list, kept: list, start: int, depth: int, split) -> list:
    """`_outer_chunks`' loops over dims `start`.. in memory order at indent `depth` (dim
    `split` over ``klo, khi`` only), each value folded into ``partial[base + k]``, k the flat
    index of `kept` dims: per run of the reduced dims after the last of them."""
    red = nest.reduction
    kflat = f"i{kept[0]}"
    for d in kept[1:]:
        kflat = f"({kflat}) * d{d} + i{d}"
    body = []
    for d in range(start, nest.rank):
        body.append(f"{IND * depth}for i{d} in range({'klo, khi' if d == split else f'd{d}'}):")
        depth += 1
        if d == kept[-1]:
            body.append(f"{IND * depth}acc = {_init(red)}")
            acc_depth = depth
    body += _fold_loops(red, (), depth, inner)
    return body + [f"{IND * acc_depth}{fold(red.combine, f'partial[base + {kflat}]', 'acc')}"]


def _column_rows(nest: LoopNest, red, comp: list, per_row: list, per_elem: list, base: int) -> list:
    """`_leading_reduction`'s sweep of one task's rows at indent `base`: the rows' elements
    into the outputs and the task's slice of ``partial``."""
    last = nest.rank - 1
    rows = list(range(last))
    acc_np = _np_type(red.acc_dtype)
    # float32 sums over one row dim: SUM_BLOCK rows in float32, each block added in float64;
    # widening every element left the loop scalar (940 us against 757).
    blocked = red.block_dtype is not None and len(rows) == 1
    body = []
    if blocked:
        body += [f"{IND * base}for b0 in range(rc * d0 // nrc, (rc + 1) * d0 // nrc, {SUM_BLOCK}):",
                 f"{IND * (base + 1)}for j in range(n):",
                 f"{IND * (base + 2)}bacc[j] = 0",
                 f"{IND * (base + 1)}for i0 in range(b0, min(b0 + {SUM_BLOCK}, (rc + 1) * d0 // nrc)):"]
        depth = base + 2
    else:
        body.append(f"{IND * base}for i0 in range(rc * d0 // nrc, (rc + 1) * d0 // nrc):")
        depth = base + 1
    for d in rows[1:]:
        body.append(f"{IND * depth}for i{d} in range(d{d}):")
        depth += 1
    row_idx = ", ".join(f"i{d}" for d in rows)
    body += [IND * depth + line for line in per_row]
    body += [f"{IND * depth}o{o.m} = {o.array}[{row_idx}, lo:hi]" for o in nest.outputs]
    body.append(f"{IND * depth}for j in range(n):")
    depth += 1
    body += [IND * depth + line for line in per_elem + comp]
    body += [f"{IND * depth}o{o.m}[j] = {o.value}" for o in nest.outputs]
    if blocked:
        body.append(f"{IND * depth}bacc[j] += {red.value}")
        body += [f"{IND * (base + 1)}for j in range(n):",
                 f"{IND * (base + 2)}accb[j] += {acc_np}(bacc[j])"]
    else:
        body.append(f"{IND * depth}{_combine(red, 'accb[j]', red.value)}")
    return body


def _row_loops(flat: str, dims: list, ind: str) -> list:
    """A flat loop over `dims` but the last (indices by `unflatten`) around a plain loop over
    the last: the statements that follow go two levels below `ind`."""
    outer = " * ".join(f"d{d}" for d in dims[:-1]) or "1"
    out = [f"{ind}for {flat} in range({outer}):"]
    out += unflatten(flat, dims[:-1], ind + IND)
    return out + [f"{ind}{IND}for i{dims[-1]} in range(d{dims[-1]}):"]


def _decomposed_loops(nest: LoopNest, inner: list, loop: str) -> list:
    """The nested form for ranks too deep to nest (Python allows 20 nested blocks, numpy 64
    dims): one flat loop over the kept dims (and one over the reduced), each index recovered
    by division, the last dim a loop of its own so the divisions run once per row (inside,
    a rank-14 map took 130-165 s to compile)."""
    red = nest.reduction
    if red is None:
        dims = list(range(nest.rank))
        body = [f"{IND}n = {' * '.join(f'd{d}' for d in dims[:-1])}",
                f"{IND}for flat in {loop}(n):"]
        body += unflatten("flat", dims[:-1], IND * 2)
        body.append(f"{IND * 2}for i{dims[-1]} in range(d{dims[-1]}):")
        return body + [IND * 3 + s for s in inner]
    init = _init(red)
    kept, rd = list(red.kept), list(red.dims)
    body = [f"{IND}nr = {' * '.join(f'd{d}' for d in rd) or '1'}"]
    if kept:
        body += [f"{IND}nk = {' * '.join(f'd{d}' for d in kept)}",
                 f"{IND}for fk in {loop}(nk):"]
        body += unflatten("fk", kept, IND * 2)
        body.append(f"{IND * 2}acc = {init}")
        body += _row_loops("fr", rd, IND * 2) + _fold_loops(red, (), 4, inner)
        out_idx = ", ".join(f"i{d}" for d in kept)
        body.append(f"{IND * 2}red[{out_idx}] = {_cast_back('acc', red.out_dtype)}")
        return body
    body += [f"{IND}nchunk = min(64, max(1, nr // 4096))",
             f"{IND}partial = np.empty(nchunk, {_np_type(red.acc_dtype)})",
             f"{IND}for c in {loop}(nchunk):",
             f"{IND * 2}acc = {init}",
             f"{IND * 2}for fr in range(c * nr // nchunk, (c + 1) * nr // nchunk):"]
    body += unflatten("fr", rd, IND * 3) + _fold_loops(red, (), 3, inner)
    body.append(f"{IND * 2}partial[c] = acc")
    return body + _fold_partials("nchunk", red)


def _arg_rows(nest: LoopNest, inner: list, loop: str, bits: set) -> list:
    """Loops for an argmax/argmin over the innermost dim. A row of up to ARG_BLOCK elements
    is one scan keeping the index. A longer one folds each block of ARG_BLOCK elements to
    its extreme in a loop that vectorizes (floats on integer keys, codegen_cpu_rows
    `split_nan`: a nan's key lies beyond the infinities', -0.0's is +0.0's); the first block that improves
    the row's extreme, or the first holding a nan, is then read again up to the first
    element equal to it, or the first nan: PyTorch's index either way."""
    from .codegen_cpu_rows import _KEYS, _key, split_nan
    red = nest.reduction
    if red.k:
        return _top_rows(nest, inner, loop)
    (d,) = red.dims
    best = replace(red, combine=red.combine[3:])   # the fold of the values: max or min
    better = ">" if best.combine == "max" else "<"
    body, depth = _outer_loops(list(red.kept), loop, False)
    i1, i2, i3, i4 = (IND * (depth + j) for j in range(4))
    v, B, n = red.value, ARG_BLOCK, f"d{d}"
    if split_nan(best):
        it, _, _, f2i, i2f, ninf, pinf = _KEYS[red.acc_dtype]
        bits.update((f2i, i2f))
        lo, hi = f"np.{it}({ninf})", f"np.{it}({pinf})"
        # (-0.0's key, -1, taken as +0.0's: the two are equal, the first of them wins)
        folds = [f"{i4}b = {f2i}({v})", f"{i4}key = {_key('b', red.acc_dtype)}",
                 f"{i4}key = key if key != np.{it}(-1) else np.{it}(0)",
                 f"{i4}bh = key if key > bh else bh", f"{i4}bl = key if key < bl else bl"]
        blk, init = ("bh", lo) if best.combine == "max" else ("bl", hi)
        starts = [f"{i3}bh = {lo}", f"{i3}bl = {hi}"]
        ends = [f"{i3}if nb < 0 and (bh > {hi} or bl < {lo}):", f"{i4}nb = b0"]
        found = f"(nb >= 0 and {v} != {v}) or (nb < 0 and {v} == m)"
        extreme = f"{i2f}({_key('acc', red.acc_dtype)})"
    else:
        init = _init(best)
        folds, blk = [i4 + fold(best.combine, "bk", v)], "bk"
        starts, ends, found, extreme = [f"{i3}bk = {init}"], [], f"{v} == m", "acc"
    body += [f"{i1}at = 0", f"{i1}if {n} <= {B}:", f"{i2}m = {_init(best)}", f"{i2}for i{d} in range({n}):"]
    body += [i3 + s for s in inner] + [f"{i3}if {v} != {v}:", f"{i4}at = i{d}", f"{i4}break",
                                       f"{i3}if {v} {better} m:", f"{i4}m = {v}", f"{i4}at = i{d}"]
    body += [f"{i1}else:", f"{i2}acc = {init}", f"{i2}nb = -1", f"{i2}for b0 in range(0, {n}, {B}):"] + starts
    body += [f"{i3}for i{d} in range(b0, min(b0 + {B}, {n})):"] + [i4 + s for s in inner] + folds + ends
    body += [f"{i3}if {blk} {better} acc:", f"{i4}acc = {blk}", f"{i4}at = b0"]
    body += [f"{i2}s = nb if nb >= 0 else at", f"{i2}m = {extreme}",
             f"{i2}for i{d} in range(s, min(s + {B}, {n})):"] + [i3 + s for s in inner]
    body += [f"{i3}if {found}:", f"{i4}at = i{d}", f"{i4}break"]
    return body + [f"{i1}red[{', '.join(f'i{k}' for k in red.kept) or '0'}] = at"]


# Elements of a row each task of a scatter's parallel variant adds at least.
SCATTER_CHUNK = 4096


def render_scatter(nest: LoopNest, parallel: bool):
    """The kernel of a scatter nest (loopnest.Scatter): the index checked first (an
    IndexError before anything is written), the base copied, then the updates added in
    their order. The parallel variant splits the non-indexed last dim into chunks that each
    walk every update, so each element's sum runs in the same order whatever the threads."""
    from .codegen_cpu import CpuEmitter, KernelSpec, module_head, signature
    from .emitter import render_steps
    from . import llvmopts
    sc, rank = nest.scatter, nest.rank
    comp, emitters = render_steps(nest, CpuEmitter)
    idx = nest.operands[sc.index].array
    brank = len(nest.outputs[0].var.aval.shape)
    at = ", ".join(f"j{t}" for t in range(brank))
    base = f"{nest.operands[sc.base].array}[{at}]" if sc.fill is None else CpuEmitter(sc.fill.dtype).const(
        sc.fill.value, sc.fill.dtype)
    lead = ", ".join(f"i{d}" for d in range(sc.k))
    body = [f"{IND}n = out0.shape[0]"]
    for d in range(sc.k):
        body.append(f"{IND * (d + 1)}for i{d} in range(d{d}):")
    depth = IND * (sc.k + 1)
    what = "scatter_add" if sc.nonneg else "index_add"
    body += [f"{depth}r = {idx}[{lead}]",
             f"{depth}if r < {'0' if sc.nonneg else '-n'} or r >= n:",
             f"{depth}{IND}raise IndexError('{what}', r, n)"]   # (kernel_errors.py words it)
    last = rank - 1

    def adds(split: bool, d0: int) -> list:
        """The base written, then the updates added: on the threads where `split`."""
        # (element by element with unsigned indices: a row assigned whole, or a signed
        # index's wrap-around test, keeps these loops scalar: 5x slower)
        out = [f"{IND * d0}for j0 in {'prange' if split else 'range'}(n):"]
        out += [f"{IND * (d0 + t)}for j{t} in range(out0.shape[{t}]):" for t in range(1, brank)]
        out.append(f"{IND * (d0 + brank)}out0[{at}] = {base}")
        if split:
            out += [f"{IND * d0}nchunk = min(64, d{last} // {SCATTER_CHUNK})", f"{IND * d0}for c in prange(nchunk):",
                    f"{IND * (d0 + 1)}lo = c * d{last} // nchunk", f"{IND * (d0 + 1)}hi = (c + 1) * d{last} // nchunk"]
        depth = d0 + split
        for d in range(rank + 1):
            if d == sc.k:
                out += [f"{IND * depth}r = {idx}[{lead}]", f"{IND * depth}ru = np.uintp(r + n if r < 0 else r)"]
            if d < rank:
                out.append(f"{IND * depth}for i{d} in range({'lo, hi' if split and d == last else f'd{d}'}):")
                depth += 1
        ind = IND * depth
        out += [ind + op.load for op in nest.operands if op.k not in (sc.base, sc.index) and op.layout != "scalar"]
        out += [ind + c for c in comp]
        return out + [f"{ind}out0[{', '.join(['ru'] + [f'i{d}' for d in range(sc.k, rank)])}] += {sc.value}"]
    if parallel and rank > sc.k:
        # (a shorter row runs on one thread: a launch on the runtime's threads costs more
        # than its adds, 256 updates of 1024-wide rows 0.47 ms split, 0.18 serially)
        body += [f"{IND}if d{last} >= {2 * SCATTER_CHUNK}:"] + adds(True, 2) + [f"{IND}else:"] + adds(False, 2)
    else:
        body += adds(False, 1)
    head = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    imports = set().union(*(em.imports for em in emitters))
    opts = llvmopts.kernel_options(1, parallel, "scatter", arrays=len(nest.operands) + 1)
    src = module_head(parallel, imports, opts) + [
        "", "", f"@njit({signature(nest, None)!r}, parallel={parallel}, cache=CACHE, error_model='numpy')",
        f"def {nest.name}({', '.join(nest.arguments())}):", f'    """fused group: {nest.ops} (scatter)"""']
    return KernelSpec("\n".join(src + head + body) + "\n", nest, parallel, "scatter", opts)


def _top_rows(nest: LoopNest, inner: list, loop: str) -> list:
    """Loops for a topk over the innermost dim: one scan a row keeps its best values in a
    buffer of k (``kv``) and their indices in the row's output, best first. A value better
    than the k-th moves each worse one down a slot, up to the first it does not beat; an
    equal earlier one stays ahead: the stable order's first k, NaN the largest (ARGSORT's
    order). (Locals unrolled per slot ran 3x slower on long rows.)"""
    red = nest.reduction
    (d,) = red.dims
    k, v, q = red.k, red.value, red.k - 1

    def beats(w: str) -> str:
        if not red.acc_dtype.startswith("float"):
            return f"{v} {'>' if red.combine == 'argmax' else '<'} {w}"
        if red.combine == "argmax":
            return f"({v} > {w} or ({v} != {v} and {w} == {w}))"
        return f"({v} < {w} or ({w} != {w} and {v} == {v}))"
    body, depth = _outer_loops(list(red.kept), loop, False)
    i1, i2, i3, i4 = (IND * (depth + j) for j in range(4))
    row = ", ".join(f"i{kd}" for kd in red.kept)
    body += [f"{i1}kv = np.empty({k}, np.{red.acc_dtype})", f"{i1}ki = red[{row}]" if row else f"{i1}ki = red",
             f"{i1}m = 0", f"{i1}for i{d} in range(d{d}):"] + [i2 + s for s in inner]
    body += [f"{i2}if m == {k}:", f"{i3}if not {beats(f'kv[{q}]')}:", f"{i4}continue", f"{i3}p = {q}",
             f"{i2}else:", f"{i3}p = m", f"{i3}m += 1",
             f"{i2}while p > 0 and {beats('kv[p - 1]')}:", f"{i3}kv[p] = kv[p - 1]", f"{i3}ki[p] = ki[p - 1]",
             f"{i3}p -= 1", f"{i2}kv[p] = {v}", f"{i2}ki[p] = i{d}"]
    return body
