"""The numba CUDA renderer of a rows nest (loopnest.py, rowpasses.py): a block per row.

Each block strides over rows; in each pass its threads split the row (coalesced), fold in
registers, then through shared memory (deterministic; max/min keep numpy's nan). Every
thread reads the row's result for the next pass; thread 0 writes per-row outputs. float32
accumulates in float32 (`loopnest.accumulation`). Column sums (`LoopNest.cols`) are not
rendered: fusion keeps them for CPU values only.
"""
from __future__ import annotations

from .emitter import NUMBA_TYPE, fold, unflatten
from .loopnest import LoopNest
from .rowpasses import schedule

__all__ = ["render_rows"]

IND = "    "


def _block_folds(nest: LoopNest, folds, block: int, em, ind: str) -> list:
    """Fold each thread's ``acc<k>`` of the rows `folds` across the block into ``r<k>``."""
    from .codegen_cuda import _cast_back, tree_fold
    lines = []
    for k in folds:
        red = nest.rows[k]
        buf = f"buf_{red.acc_dtype}"
        lines.append(f"{ind}{buf}[t] = acc{k}")
        lines += tree_fold(red.combine, buf, block, ind)
        lines += [f"{ind}r{k} = {_cast_back(f'{buf}[0]', red.acc_dtype, red.out_dtype, em)}",
                  f"{ind}cuda.syncthreads()"]   # every thread has read buf[0] before its reuse
    return lines


def render_rows(nest: LoopNest, block: int):
    from .codegen_cuda import CudaEmitter

    if nest.cols:
        raise NotImplementedError("CUDA rows kernels do not fold sums over their rows")
    sched = schedule(nest)
    rank, last = nest.rank, nest.rank - 1
    src_of, used_types, functions, sig = kernel_head(nest, rank)
    em = CudaEmitter("float32")
    params = nest.arguments()

    accs = sorted({red.acc_dtype for red in nest.rows})
    body = [f"{IND}t = cuda.threadIdx.x"]
    body += [f"{IND}buf_{dt} = cuda.shared.array({block}, {NUMBA_TYPE[dt]})" for dt in accs]
    used_types |= {NUMBA_TYPE[dt] for dt in accs}
    body += [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    nrows = " * ".join(f"d{d}" for d in range(last)) or "1"
    body += [f"{IND}nrows = {nrows}", f"{IND}for row in range(cuda.blockIdx.x, nrows, cuda.gridDim.x):"]
    I2, I3 = IND * 2, IND * 3
    body += unflatten("row", list(range(last)), I2)
    body += [f"{I2}{op.load}" for op in sched.row_loads if op.layout != "scalar"]
    full = ", ".join(f"i{d}" for d in range(rank))
    for p in sched.passes:
        body += [I2 + src_of[st.name] for st in p.before]
        for k in p.folds:
            red = nest.rows[k]
            body.append(f"{I2}acc{k} = {em.const(red.init(), red.acc_dtype)}")
        body.append(f"{I2}for i{last} in range(t, d{last}, {block}):")
        body += [f"{I3}{op.load}" for op in p.loads]
        body += [f"{I3}{name} = {o.array}[{full}]" for o, name in p.restore]   # this thread's store
        body += [I3 + src_of[st.name] for st in p.steps]
        body += [f"{I3}{o.array}[{full}] = {name}" for o, name in p.stash]
        body += [f"{I3}{fold(nest.rows[k].combine, f'acc{k}', nest.rows[k].value)}" for k in p.folds]
        body += [f"{I3}{o.array}[{full}] = {o.value}" for o in p.writes if (o, o.value) not in p.restore]
        body += _block_folds(nest, p.folds, block, em, I2)
    body += [I2 + src_of[st.name] for st in sched.after]
    if sched.row_writes:
        row_idx = ", ".join([f"i{d}" for d in range(last)] + ["0"])
        body.append(f"{I2}if t == 0:")
        body += [f"{I3}{o.array}[{row_idx}] = {o.value}" for o in sched.row_writes]
    used_types |= em.types
    return kernel_spec(nest, sig, params, "rows, a block per row", body, used_types, functions,
                       "rows", block)


def kernel_head(nest: LoopNest, out_rank=None) -> tuple:
    """What the rows and channel renderers start from: each step's rendered line, the types
    and math functions they use, and the kernel's signature (outputs of rank `out_rank`)."""
    from .codegen_cuda import cuda_steps
    from .emitter import arr_type
    lines, emitters = cuda_steps(nest)
    src_of = {st.name: ln for st, ln in zip(nest.steps, lines)}
    used_types = set().union(*(em.types for em in emitters))
    functions = set().union(*(em.functions for em in emitters))
    sig_args = [arr_type(op.dtype, nest.arg_rank(op.k), op.layout != "nd") for op in nest.operands]
    sig_args += [arr_type(o.dtype, out_rank or len(o.var.aval.shape), True) for o in nest.outputs]
    sig_args += ["int64"] * len(nest.sizes)
    return src_of, used_types, functions, f"void({', '.join(sig_args)})"


def kernel_spec(nest: LoopNest, sig: str, params: list, what: str, body: list, used_types: set,
                functions, kind: str, block: int):
    """The CudaKernelSpec of a rows or windows kernel: its module source (header, math
    prelude, the decorated function with `body`) and its operands' layouts."""
    from .codegen_cuda import CudaKernelSpec, module_source
    source = module_source([f"@cuda.jit({sig!r}, cache=CACHE)", f"def {nest.name}({', '.join(params)}):",
                            f'    """fused group: {nest.ops} ({what})"""'] + body, used_types, functions)
    n_arrays = len(nest.operands) + len(nest.outputs)
    contiguous = [op.layout != "nd" for op in nest.operands] + [True] * len(nest.outputs)
    return CudaKernelSpec(source, nest, kind, flatten=(False,) * n_arrays, contiguous=tuple(contiguous),
                          block=block, signatures={nest.name: sig})
