"""The numba CUDA renderer: source of one fused group's kernel from its `loopnest.LoopNest`.

The twin of `codegen_cpu` from the same description: the same per-element expressions
(each primitive's ``scalar`` rule through a `CudaEmitter`), index expressions and calling
convention, so a plan calls a CUDA kernel as it calls a CPU one::

    kernel(*inputs, *per_element_outputs, [reduction_output], *sizes)

Loop shapes: *flat*, a grid-stride loop over the flat index; *nd*, the same loop over
``d0 * d1 * ...`` with the multi-index recovered by divmod and N-d reads of broadcast or
strided operands.

Reductions: *full*, each thread folds its grid-stride share, each block folds through
shared memory, and a one-block ``<name>_finish`` kernel folds the partials: no atomics, so
results are deterministic and max/min keep numpy's nan semantics (``cuda.atomic.max``
ignores a nan). float32 sums stay float32 (`loopnest.accumulation`). *Partial*: one thread
per output element loops over the reduced dims.

Math: constants are typed, and functions are spelled as `mathnames.MATH` says (libdevice
by argument type). Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the module
binds numpy's ufuncs instead of ``math`` (which raises on overflow), so the simulator
tests check inf/nan propagation too, and modules are exec'd in memory; on a GPU `load`
hands the source, tagged with the compute capability, to `diskcache.load_module`. See
docs/guide/cuda.md.
"""
from __future__ import annotations

import re

import numpy as np

from ..jit.ir import Literal
from .cuda_launch import BLOCK, CudaKernel, _c_contiguous, launch, load, simulator_enabled
from .emitter import NUMBA_TYPE, Emitter, arr_type, fold, render_steps, unflatten
from .fusion import Group
from .loopnest import LoopNest, lower, operand_layouts
from .mathnames import FORMULAS, MATH

__all__ = ["CudaEmitter", "cuda_steps", "CudaKernelSpec", "CudaKernel", "render", "generate", "load",
           "launch", "layouts_of", "run_group", "run_graph", "compile_ptx", "BLOCK", "simulator_enabled"]

IND = "    "


class CudaEmitter(Emitter):
    """numba type names (``float32(...)``) and device math functions (`mathnames.MATH`)."""

    _SPECIAL = {"nan": "math.nan", "inf": "math.inf"}

    def __init__(self, dtype: str):
        super().__init__(dtype)
        self.functions: set = set()   # math functions used (bound in the module prelude)
        self.types: set = set()       # numba type names used in constants and casts

    def _type(self, dt: str) -> str:
        name = NUMBA_TYPE[dt]
        self.types.add(name)
        return name

    def _call(self, fn: str, spec, args: tuple) -> str:
        if not self.dtype.startswith("float"):
            if spec.integer_identity:
                return args[0]
            raise NotImplementedError(f"{fn} on {self.dtype}")
        if spec.cuda == "formula":
            return FORMULAS[fn](self, *args)
        self.functions.add(fn)
        return f"{fn}({', '.join(args)})"


def cuda_steps(nest: LoopNest) -> tuple:
    """`render_steps` of `nest` through `CudaEmitter`s, refusing, by name, a primitive whose
    rule asks for CPU-only helpers (``emitter.imports``: bf16 words are the CPU's LLVM
    intrinsics), which a CUDA module would otherwise call undefined."""
    lines, emitters = render_steps(nest, CudaEmitter)
    for st, em in zip(nest.steps, emitters):
        if em.imports:
            raise NotImplementedError(f"{st.prim.name} needs the CPU-only helpers "
                                      f"{', '.join(sorted(em.imports))}: the CUDA backend cannot render it")
    return lines, emitters


class CudaKernelSpec:
    """A rendered CUDA kernel: its source, its nest, and what `CudaKernel` needs to launch it.
    ``mode`` is "flat", "nd", "partial", "rows" or "channels"; ``reduction`` None, "full" or
    "partial"; ``flatten[j]``: array argument j passed as a 1-D view; ``contiguous[j]``: its
    declared type is C-contiguous (numba does not check arguments against an explicit
    signature, so `CudaKernel` does); ``signatures``: kernel name -> numba signature."""

    def __init__(self, source: str, nest: LoopNest, mode: str, *, flatten, contiguous, block, signatures):
        red = nest.reduction
        self.source = source
        self.nest = nest
        self.name = nest.name
        self.mode = mode
        self.rank = nest.rank
        self.reduction = None if red is None else ("full" if red.full else "partial")
        self.kept = red.kept if red is not None else tuple(range(nest.rank))
        self.acc_dtype = red.acc_dtype if red is not None else None
        self.flatten = flatten
        self.contiguous = contiguous
        self.block = block
        self.signatures = signatures
        self.finish_name = f"{nest.name}_finish" if self.reduction == "full" else None
        self.llvm_options = ()


def _cast_back(x: str, acc_dt: str, dtype: str, em: CudaEmitter) -> str:
    if dtype == acc_dt:
        return x
    if dtype == "bool":
        return f"({x} != 0)"
    return f"{em._type(dtype)}({x})"


def tree_fold(combine: str, buf: str, block: int, ind: str) -> list:
    """Fold ``buf[0:block]`` into ``buf[0]`` (a tree through shared memory; threads in step)."""
    lines = [f"{ind}cuda.syncthreads()", f"{ind}s = {block // 2}", f"{ind}while s > 0:",
             f"{ind}    if t < s:"]
    if combine in ("add", "mul"):
        lines.append(f"{ind}        {fold(combine, f'{buf}[t]', f'{buf}[t + s]')}")
    else:
        lines += [f"{ind}        a = {buf}[t]", f"{ind}        b = {buf}[t + s]",
                  f"{ind}        {fold(combine, 'a', 'b')}", f"{ind}        {buf}[t] = a"]
    return lines + [f"{ind}    cuda.syncthreads()", f"{ind}    s //= 2"]


def _block_fold(combine: str, acc_dt: str, block: int, ind: str) -> list:
    """Fold each thread's ``acc`` over the block through shared memory into ``buf[0]``."""
    return [f"{ind}t = cuda.threadIdx.x", f"{ind}buf = cuda.shared.array({block}, {NUMBA_TYPE[acc_dt]})",
            f"{ind}buf[t] = acc"] + tree_fold(combine, "buf", block, ind)


def render(nest: LoopNest, block: int = BLOCK) -> CudaKernelSpec:
    """The numba CUDA source of `nest` (kernels of `block` threads, a power of two)."""
    if block < 2 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 2, got {block}")
    from .codegen_cpu import channels
    if channels(nest):
        from .codegen_cuda_channels import render_channels
        return render_channels(nest, block)
    if nest.window is not None:
        from .codegen_cuda_windows import render_windows
        return render_windows(nest, block)
    if nest.rows:
        from .codegen_cuda_rows import render_rows
        return render_rows(nest, block)
    rank, name, red = nest.rank, nest.name, nest.reduction
    mode = "partial" if red is not None and not red.full else "flat" if nest.flat else "nd"
    comp, emitters = cuda_steps(nest)
    used_types = set().union(*(em.types for em in emitters))
    functions = set().union(*(em.functions for em in emitters))

    # ---- signature: flat operands (and outputs, outside partial reductions) are 1-D views ----
    flatten = [op.layout == "flat" and mode != "partial" for op in nest.operands]
    sig_args = [arr_type(op.dtype, 1 if op.layout == "scalar" or flat else op.rank,
                         op.layout != "nd") for op, flat in zip(nest.operands, flatten)]
    sig_args += [arr_type(o.dtype, rank if mode == "partial" else 1, True) for o in nest.outputs]
    flatten += [mode != "partial"] * len(nest.outputs)
    params = [op.array for op in nest.operands] + [o.array for o in nest.outputs]
    em = CudaEmitter("float32")
    if red is not None:
        acc_dt, out_dt = red.acc_dtype, red.out_dtype
        init = em.const(red.init(), acc_dt)
        # (a full reduction's per-block partials, not the result)
        sig_args.append(arr_type(acc_dt, 1, True) if red.full
                        else arr_type(out_dt, len(red.kept), True))
        params.append("partial" if red.full else "red")
        flatten.append(red.full)
    params += nest.sizes
    sig_args += ["int64"] * len(nest.sizes)
    sig = f"void({', '.join(sig_args)})"
    signatures = {name: sig}

    # ---- the body ----
    body = [f"{IND}{op.name} = {op.array}[0]" for op in nest.operands if op.layout == "scalar"]
    if mode in ("flat", "nd"):
        if mode == "nd":
            body.append(f"{IND}n = {' * '.join(nest.sizes) if nest.sizes else '1'}")
        if red is not None:
            body.append(f"{IND}acc = {init}")
        body.append(f"{IND}for i in range(cuda.grid(1), n, cuda.gridsize(1)):")
        inner = unflatten("i", list(range(rank)), "") if mode == "nd" else []
        inner += [f"{op.name} = {op.array}[i]" if op.layout == "flat" else op.load
                  for op in nest.operands if op.layout != "scalar"]
        inner += comp
        inner += [f"{o.array}[i] = {o.value}" for o in nest.outputs]
        if red is not None:
            inner.append(fold(red.combine, "acc", red.value))
        body += [IND * 2 + s for s in inner]
        if red is not None:
            body += _block_fold(red.combine, acc_dt, block, IND)
            body += [f"{IND}if t == 0:", f"{IND * 2}partial[cuda.blockIdx.x] = buf[0]"]
    else:
        body += [f"{IND}m = {' * '.join(f'd{d}' for d in red.kept)}",
                 f"{IND}for k in range(cuda.grid(1), m, cuda.gridsize(1)):"]
        body += unflatten("k", list(red.kept), IND * 2)
        body.append(f"{IND * 2}acc = {init}")
        depth = 2
        for d in red.dims:
            body.append(f"{IND * depth}for i{d} in range(d{d}):")
            depth += 1
        full_idx = ", ".join(f"i{d}" for d in range(rank))
        inner = [op.load for op in nest.operands if op.layout != "scalar"]
        inner += comp
        inner += [f"{o.array}[{full_idx}] = {o.value}" for o in nest.outputs]
        inner.append(fold(red.combine, "acc", red.value))
        body += [IND * depth + s for s in inner]
        out_idx = ", ".join(f"i{d}" for d in red.kept)
        body.append(f"{IND * 2}red[{out_idx}] = {_cast_back('acc', acc_dt, out_dt, em)}")

    lines = [f"@cuda.jit({sig!r}, cache=CACHE)",
             f"def {name}({', '.join(params)}):",
             f'    """fused group: {nest.ops} ({mode})"""'] + body
    if red is not None and red.full:
        fsig = f"void({arr_type(acc_dt, 1, True)}, {arr_type(out_dt, 1, True)}, int64)"
        signatures[f"{name}_finish"] = fsig
        lines += ["", "", f"@cuda.jit({fsig!r}, cache=CACHE)",
                  f"def {name}_finish(partial, red, nparts):",
                  f'    """fold the per-block partials of `{name}` into red[0] (one block)"""',
                  f"    acc = {init}",
                  f"    for j in range(cuda.threadIdx.x, nparts, {block}):",
                  "        " + fold(red.combine, "acc", "partial[j]")]
        lines += _block_fold(red.combine, acc_dt, block, "    ")
        lines += ["    if t == 0:",
                  f"        red[0] = {_cast_back('buf[0]', acc_dt, out_dt, em)}"]
    contiguous = [op.layout != "nd" for op in nest.operands] + [True] * (len(flatten) - len(nest.operands))
    used_types |= em.types
    if red is not None:
        used_types.add(NUMBA_TYPE[acc_dt])
    return CudaKernelSpec(module_source(lines, used_types, functions), nest, mode, flatten=tuple(flatten), contiguous=tuple(contiguous),
                          block=block, signatures=signatures)


def module_source(lines: list, used_types, functions) -> str:
    """A generated CUDA kernel module: its origin, imports and math prelude, then `lines`."""
    header = ["# generated by tracejit (CUDA backend); sizes are arguments, never constants",
              "import math", "", "import numpy as np",
              f"from numba import {', '.join(['cuda'] + sorted(used_types))}"]
    if functions:
        header += _math_prelude(sorted(functions))
    return "\n".join(header + ["", ""] + lines) + "\n"


def _math_prelude(fs: list) -> list:
    """Module lines binding the device math functions `fs` (numpy's ufuncs in the simulator)."""
    sim = [f for f in fs if MATH[f].ufunc]
    lines = ["from numba.core import config", "",
             "if config.ENABLE_CUDASIM:",
             "    # The simulator runs kernels as Python, where math.* raise on overflow, inf",
             "    # and domain errors: numpy's ufuncs give the device's special values instead."]
    if sim:
        lines.append(f"    {', '.join(sim)} = {', '.join(MATH[f].ufunc for f in sim)}")
    for f in ("erf", "erfc"):
        if f in fs:
            lines += ["", f"    def {f}(x):", f"        return type(x)(math.{f}(x))"]
    return lines + ["else:",
                    "    # On the device: libdevice, picked by the argument type (e.g. __nv_expf for float32).",
                    f"    from math import {', '.join(fs)}"]


def generate(group: Group, layouts: tuple, name: str = "kernel", block: int = BLOCK) -> CudaKernelSpec:
    """`render` of `group`'s nest for input layouts `layouts` (see `loopnest.LAYOUTS`)."""
    return render(lower(group, layouts, name, sequential_sums=False), block)


# ----------------------------------------------------------------------------- reference driver


def layouts_of(group: Group, arrays: list) -> tuple:
    """The operand layouts for these input arrays (the plan's rule, `loopnest.operand_layouts`)."""
    return operand_layouts(group, [_c_contiguous(a) for a in arrays])


def run_group(group: Group, env: dict, xp=np, stream=None, block: int = BLOCK) -> None:
    """Run `group` on the arrays in `env` (Var -> array) and store its outputs there: the
    reference for how a plan calls a kernel (static shapes only)."""
    shape = tuple(int(d) for d in group.shape)
    rank = len(shape)
    arrays = [env[v] for v in group.inputs]
    spec = generate(group, layouts_of(group, arrays), "kernel", block=block)
    nest = spec.nest
    kernel = load(spec)
    flat = nest.flat

    def view(a):
        return a.reshape(-1) if flat and a.ndim > 1 else a
    call = [a.reshape(1) if op.layout == "scalar" else view(a) for a, op in zip(arrays, nest.operands)]
    outs = [xp.empty(tuple(int(d) for d in o.var.aval.shape) if rank else (1,), dtype=o.var.aval.dtype.np)
            for o in nest.outputs]
    call += [view(b) for b in outs]
    red = nest.reduction
    if red is not None:
        kept = [shape[d] for d in red.kept]
        rbuf = xp.empty(tuple(kept) if kept else (1,), dtype=red.var.aval.dtype.np)
        call.append(rbuf)
    sizes = [int(np.prod(shape, dtype=np.int64))] if flat else list(shape)
    kernel(*call, *sizes, stream=stream)
    for o, buf in zip(nest.outputs, outs):
        env[o.var] = buf.reshape(()) if rank == 0 else buf
    if red is not None:
        env[red.var] = rbuf.reshape(tuple(int(d) for d in red.var.aval.shape))


def run_graph(graph, *arrays, xp=np, stream=None, block: int = BLOCK) -> tuple:
    """Run a graph with every fused group on the CUDA backend and every other
    equation through its primitive's array implementation (a minimal plan)."""
    from .fusion import partition
    env = dict(zip(graph.inputs, arrays))
    for item in partition(graph):
        if isinstance(item, Group):
            run_group(item, env, xp, stream, block)
            continue
        ins = [a.value if isinstance(a, Literal) else env[a] for a in item.inputs]
        out = item.prim.impl(xp, *ins, **item.params)
        dt = item.out.aval.dtype.np
        env[item.out] = out if type(out) is xp.ndarray and out.dtype == dt else xp.asarray(out, dtype=dt)
    return tuple(a.value if isinstance(a, Literal) else env[a] for a in graph.outputs)


# ----------------------------------------------------------------------------- inspection


_DECORATOR = re.compile(r"^@cuda\.jit\(.*\)$", re.MULTILINE)


def compile_ptx(spec: CudaKernelSpec, cc: tuple = (8, 0)) -> dict:
    """PTX of each kernel in `spec` for compute capability `cc`: name -> text. Needs NVVM,
    not a GPU (not under the simulator): checks what the device compiler makes of a source."""
    if simulator_enabled():
        raise RuntimeError("compile_ptx needs numba's real CUDA target, not the simulator")
    from .cuda_launch import numpy_compat
    numpy_compat()
    from numba import cuda
    namespace = {"CACHE": False, "__name__": "tracejit_cuda_ptx"}
    exec(compile(_DECORATOR.sub("", spec.source), "<tracejit cuda ptx>", "exec"), namespace)
    return {name: cuda.compile_ptx(namespace[name], sig, cc=cc)[0] for name, sig in spec.signatures.items()}
