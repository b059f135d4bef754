"""The numba CUDA renderer of a windows nest (loopnest.Window): a thread per output or input element.

A grid-stride loop over the fold's outputs or the gather's input elements (coalesced),
each running the CPU renderer's loop body (codegen_cpu_windows.window_body: the same
first-maximum, NaN and order-of-addition rules), folded in registers. Launched in mode
"nd" with enough blocks for the N*C*H*W elements.
"""
from __future__ import annotations

from .codegen_cpu_windows import pooled_sizes, window_body
from .codegen_cuda_rows import kernel_head, kernel_spec
from .loopnest import LoopNest

__all__ = ["render_windows"]

IND = "    "


def render_windows(nest: LoopNest, block: int):
    from .codegen_cuda import CudaEmitter

    w = nest.window
    src_of, used_types, functions, sig = kernel_head(nest)
    lines = [src_of[st.name] for st in nest.steps]
    em = CudaEmitter(w.dtype)
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    body += pooled_sizes(nest, IND)
    inner, outer = ("i3", "i2") if w.gather else ("ox", "oy")
    size = ("d3", "d2") if w.gather else ("ow", "oh")
    I2 = IND * 2
    body += [f"{IND}total = d0 * d1 * {size[1]} * {size[0]}",
             f"{IND}for idx in range(cuda.grid(1), total, cuda.gridsize(1)):",
             f"{I2}{inner} = idx % {size[0]}", f"{I2}r = idx // {size[0]}",
             f"{I2}{outer} = r % {size[1]}", f"{I2}r = r // {size[1]}",
             f"{I2}i1 = r % d1", f"{I2}i0 = r // d1"]
    body += window_body(nest, lines, em, I2)
    used_types |= em.types
    return kernel_spec(nest, sig, nest.arguments(), f"{'gather' if w.gather else 'fold'} over windows",
                       body, used_types, functions, "nd", block)
