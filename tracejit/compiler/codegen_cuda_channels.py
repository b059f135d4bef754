"""The numba CUDA renderer of a channel nest (codegen_cpu_channels.py's nest): a block per channel.

Each block strides over channels; in each pass (rowpasses.py) its threads split the
channel's N*H*W elements (coalesced), fold in registers and then through shared memory as
codegen_cuda_rows.py does. Thread 0 writes per-channel outputs; the last pass writes the
per-element outputs or, with a window, walks the pooled outputs with the shared window
body. Launched one block per channel up to a cap (cuda_launch, mode "channels").
"""
from __future__ import annotations

from .codegen_cpu_windows import pooled_sizes, window_body
from .codegen_cuda_rows import _block_folds, kernel_head, kernel_spec
from .emitter import NUMBA_TYPE, fold
from .loopnest import LoopNest
from .rowpasses import schedule

__all__ = ["render_channels"]

IND = "    "


def _position(size: str, inner: tuple, ind: str, block: int) -> list:
    """A loop of thread t over a channel's `size` flat positions, split into ``i0`` and
    the two `inner` indices of sizes ``inner[k][1]``."""
    (a, na), (b, nb) = inner
    return [f"{ind}for pos in range(t, {size}, {block}):", f"{ind}{IND}i0 = pos // ({na} * {nb})",
            f"{ind}{IND}rem = pos - i0 * ({na} * {nb})", f"{ind}{IND}{a} = rem // {nb}",
            f"{ind}{IND}{b} = rem - {a} * {nb}"]


def render_channels(nest: LoopNest, block: int):
    from .codegen_cuda import CudaEmitter

    sched = schedule(nest, stash=False)   # (the last pass's output is pooled: nothing to stash in)
    w = nest.window
    src_of, used_types, functions, sig = kernel_head(nest)
    em = CudaEmitter("float32")

    accs = sorted({red.acc_dtype for red in nest.rows})
    I2, I3 = IND * 2, IND * 3
    body = [f"{IND}t = cuda.threadIdx.x"]
    body += [f"{IND}buf_{dt} = cuda.shared.array({block}, {NUMBA_TYPE[dt]})" for dt in accs]
    used_types |= {NUMBA_TYPE[dt] for dt in accs}
    body += [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    if w is not None:
        body += pooled_sizes(nest, IND)
    body += [f"{IND}for i1 in range(cuda.blockIdx.x, d1, cuda.gridDim.x):"]
    body += [f"{I2}{op.name} = {op.array}[{op.subscript()}]" for op in sched.row_loads if op.layout != "scalar"]
    elements = _position("d0 * d2 * d3", (("i2", "d2"), ("i3", "d3")), I2, block)
    folds = [p for p in sched.passes if p.folds]
    last = [p for p in sched.passes if not p.folds]
    for p in folds:
        body += [I2 + src_of[st.name] for st in p.before]
        body += [f"{I2}acc{k} = {em.const(nest.rows[k].init(), nest.rows[k].acc_dtype)}" for k in p.folds]
        body += elements
        body += [f"{I3}{op.name} = {op.array}[{op.subscript()}]" for op in p.loads]
        body += [I3 + src_of[st.name] for st in p.steps]
        body += [f"{I3}{fold(nest.rows[k].combine, f'acc{k}', nest.rows[k].value)}" for k in p.folds]
        body += _block_folds(nest, p.folds, block, em, I2)
    for p in last:
        body += [I2 + src_of[st.name] for st in p.before]
    body += [I2 + src_of[st.name] for st in sched.after]
    if sched.row_writes:
        body.append(f"{I2}if t == 0:")
        body += [f"{I3}{o.array}[0, i1, 0, 0] = {o.value}" for o in sched.row_writes]
    for p in last:
        if w is not None:
            wem = CudaEmitter(w.dtype)
            body += _position("d0 * oh * ow", (("oy", "oh"), ("ox", "ow")), I2, block)
            body += window_body(nest, [src_of[st.name] for st in p.steps], wem, I3, loads=p.loads)
            used_types |= wem.types
        else:
            body += elements
            body += [f"{I3}{op.name} = {op.array}[{op.subscript()}]" for op in p.loads]
            body += [I3 + src_of[st.name] for st in p.steps]
            body += [f"{I3}{o.array}[{'i1, i0' if o.cm else 'i0, i1'}, i2, i3] = {o.value}" for o in p.writes]
    used_types |= em.types
    what = "channels, window fold" if w is not None else "channels"
    return kernel_spec(nest, sig, nest.arguments(), f"{what}, a block per channel", body, used_types,
                       functions, "channels", block)
