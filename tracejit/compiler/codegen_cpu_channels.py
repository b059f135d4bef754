"""The numba CPU renderer of a channel nest: a rows nest whose rows are the channels of an
(N, C, H, W) iteration space, optionally closed by a window fold (a pooling forward).

BatchNorm written as primitives (per-channel sums, the normalize, a ReLU) is such a nest,
and with a max pooling after it the window fold is its last pass::

    for each channel c:                 # prange
        passes: fold the channel's sums over (n, h, w)
        per-channel steps and outputs
        last: per (n, c) plane the window fold with the per-element steps as prologue,
            or, without a window, the per-element outputs

The channel's run of the input stays in cache between passes, so memory sees one read and
the pooled writes. Compiled with ``fastmath={'reassoc', 'contract'}`` with the
elementwise work in inlined helpers without it, as codegen_cpu_rows'.
"""
from __future__ import annotations

from .codegen_cpu_rows import inliner
from .codegen_cpu_windows import pooled_sizes, window_body
from .loopnest import LoopNest
from .rowpasses import schedule

__all__ = ["render_channels"]

IND = "    "


def render_channels(nest: LoopNest, parallel: bool):
    from .codegen_cpu import (CpuEmitter, KernelSpec, _cast_back, _combine, _init, _np_type,
                              module_head, signature)

    sched = schedule(nest, stash=False)   # (the last pass's output is pooled: nothing to stash in)
    w = nest.window
    imports, helpers, block = inliner(nest, CpuEmitter)
    later_row = sched.row_names(nest)
    I2, I3, I4, I5 = (IND * k for k in range(2, 6))
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    if w is not None:
        body += pooled_sizes(nest, IND)
    loop = "prange" if parallel else "range"
    body += [f"{IND}for i1 in {loop}(d1):"]
    body += [f"{I2}{op.load}" for op in sched.row_loads if op.layout != "scalar"]
    folds = [p for p in sched.passes if p.folds]
    last = [p for p in sched.passes if not p.folds]
    for p in folds:
        body += block(p.before, later_row, I2)
        body += [f"{I2}acc{k} = {_init(nest.rows[k])}" for k in p.folds]
        # float32 sums fold each row of W in float32 (the lanes stay float32 wide), then
        # the row's sum in float64 (loopnest.Reduction.block_dtype)
        blocked = [k for k in p.folds if nest.rows[k].block_dtype]
        body += [f"{I2}for i0 in range(d0):", f"{I3}for i2 in range(d2):"]
        body += [f"{I4}blk{k} = {_np_type(nest.rows[k].block_dtype)}(0.0)" for k in blocked]
        body += [f"{I4}for i3 in range(d3):"]
        body += [f"{I5}{op.load}" for op in p.loads]
        body += block(p.steps, [nest.rows[k].value for k in p.folds], I5)
        for k in p.folds:
            red = nest.rows[k]
            body.append(f"{I5}blk{k} += {red.value}" if k in blocked else f"{I5}{_combine(red, f'acc{k}', red.value)}")
        body += [f"{I4}acc{k} += {_np_type(nest.rows[k].acc_dtype)}(blk{k})" for k in blocked]
        body += [f"{I2}r{k} = {_cast_back(f'acc{k}', nest.rows[k].out_dtype)}" for k in p.folds]
    for p in last:
        body += block(p.before, later_row, I2)
    body += block(sched.after, [o.value for o in sched.row_writes], I2)
    body += [f"{I2}{o.array}[0, i1, 0, 0] = {o.value}" for o in sched.row_writes]
    for p in last:
        if w is not None:
            em = CpuEmitter(w.dtype)
            step_lines = [ln.strip() for ln in block(p.steps, [w.value], "")]
            body += [f"{I2}for i0 in range(d0):", f"{I3}for oy in range(oh):", f"{I4}for ox in range(ow):"]
            body += window_body(nest, step_lines, em, I5, loads=p.loads)
            imports |= em.imports
        else:
            body += [f"{I2}for i0 in range(d0):", f"{I3}for i2 in range(d2):", f"{I4}for i3 in range(d3):"]
            body += [f"{I5}{op.load}" for op in p.loads]
            body += block(p.steps, [o.value for o in p.writes], I5)
            body += [f"{I5}{o.array}[{'i1, i0' if o.cm else 'i0, i1'}, i2, i3] = {o.value}" for o in p.writes]

    sig = signature(nest, None)
    kind = "channels, window fold" if w is not None else "channels"
    header = [f"@njit({sig!r}, parallel={parallel}, cache=CACHE, error_model='numpy', "
              "fastmath={'reassoc', 'contract'})",
              f"def {nest.name}({', '.join(nest.arguments())}):",
              f'    """fused group: {nest.ops} ({kind}, {len(sched.passes)} passes)"""']
    src = module_head(parallel, imports) + ["", ""] + [ln for h in helpers for ln in h] + header + body
    return KernelSpec("\n".join(src) + "\n", nest, parallel, "windows", ())
