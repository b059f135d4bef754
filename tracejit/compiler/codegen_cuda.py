"""Generate, load and launch the numba CUDA kernel of one fused group (CUDA backend).

The twin of `codegen_cpu`: the same groups (from `fusion.partition`), the same
per-element expressions (each primitive's ``scalar`` rule, written here through a
`CudaEmitter`), and the same calling convention, so a plan calls a CUDA kernel exactly
as it calls a CPU one::

    kernel(*inputs, *materialized_outputs, [reduction_output], *iteration_dims)

inputs in ``group.inputs`` order (0-d inputs as 1-element arrays), outputs allocated
by the caller (C-contiguous, iteration shape; rank 0 -> shape (1,)), the reduction
output with the kept dims' shape (or (1,)), then the iteration dims as ints. The
object `load` returns (`CudaKernel`) takes exactly those arguments; it views the
"flat" operands as 1-D (no copy), picks the grid, and launches on cupy's current
stream (``numba.cuda.external_stream``). Sources depend on structure, dtypes, rank,
broadcast pattern and operand layouts, never on sizes.

Loop shapes
    *flat*: every operand has the iteration shape and is C-contiguous (or is 0-d): a
    grid-stride loop over the flat index ``for i in range(cuda.grid(1), n,
    cuda.gridsize(1))``. *nd*: some operand is broadcast or strided: the same loop,
    plus the multi-index of ``i`` (divmod by the dims, passed as arguments), and those
    operands are read with N-d indexing, 0 on their broadcast dims (numba applies the
    array's own strides), the same index arithmetic as the CPU backend.

Reductions
    *Full* (over every dim): each thread folds its grid-stride share into a register,
    each block folds its threads through shared memory (a tree), and block b writes
    ``partial[b]``; a second one-block kernel (``<name>_finish``) folds the partials
    into the result. Two launches, no atomics: the result is deterministic for a
    given size, and max/min keep numpy's nan semantics (a nan anywhere gives nan, the
    same select as the CPU backend, ``r if (r > acc or r != r) else acc``), which
    ``cuda.atomic.max`` would not (it ignores a nan operand). float32 sums accumulate
    in float32 (per-thread runs are short, the tree is pairwise); integer and bool
    sums in int64, as numpy does. *Partial* (some dims kept): one thread per output
    element loops over the reduced dims. Simple and correct; coalesced when the
    reduced dims are the leading ones, strided when they are the last ones (a row
    softmax would prefer a block per row: a later optimization).

Math
    float32 stays float32: constants are typed (``float32(0.044715)``), and
    ``exp``/``tanh``/``erf``/``log1p``... are numba's ``math`` functions, which on the
    device are libdevice calls picked by the argument type (``__nv_tanhf`` for
    float32). Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) kernels run as
    Python, where ``math.exp`` raises on overflow and ``math.log`` on 0; the generated
    module binds numpy's ufuncs there instead (same special values), so the simulator
    tests check inf/nan propagation too.

Caching
    Under the simulator modules are exec'd in memory (numba's cache does not apply).
    On a GPU, `load` hands the source, tagged with the device's compute capability, to
    `diskcache.load_module`, so kernels compile once per machine like the CPU ones
    (``cuda.jit(..., cache=CACHE)``; numba's CUDA cache writes next to the source in
    the entry, as the CPU one does).

Checking on a GPU
    ``pytest -m gpu tests/cuda`` runs the GPU tests (skipped without cupy and a GPU),
    and ``python examples/cuda_check.py`` runs the GELU chain on 64M float32 through
    the generated kernel and reports ms and the fraction of the device's copy
    bandwidth against cupy eager. Without a GPU: ``NUMBA_ENABLE_CUDASIM=1`` runs the
    kernels on host arrays (``tests/cuda/sim_kernels.py``), and `compile_ptx`
    compiles a spec for a real target without a GPU when NVVM is installed (pip
    ``nvidia-cuda-nvcc-cu12`` and ``CUDA_HOME=<site-packages>/nvidia/cuda_nvcc``).
"""
from __future__ import annotations

import linecache
import math
import os
import re
import sys
import threading
import types

import numpy as np

from ..jit.ir import Literal
from .codegen_cpu import NUMBA_TYPE, Emitter, KernelSpec, _compute_dtype, _init
from .fusion import Group

__all__ = ["CudaEmitter", "CudaKernelSpec", "CudaKernel", "generate", "load", "launch",
           "run_group", "run_graph", "compile_ptx", "BLOCK", "simulator_enabled"]

BLOCK = 256  # threads per block; reductions fold one block through shared memory of this size

# The per-element math functions a scalar rule may ask for; on the device each is numba's
# `math` function (libdevice), in the simulator numpy's ufunc (see the module docstring).
_DEVICE_MATH = ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "erf", "floor", "pow")
_SIM_MATH = {"exp": "np.exp", "expm1": "np.expm1", "log": "np.log", "log1p": "np.log1p",
             "sqrt": "np.sqrt", "sin": "np.sin", "cos": "np.cos", "tanh": "np.tanh",
             "floor": "np.floor", "pow": "np.power"}


def simulator_enabled() -> bool:
    """True when numba's CUDA target is the simulator (``NUMBA_ENABLE_CUDASIM=1`` at import)."""
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


# ----------------------------------------------------------------------------- emitter


class CudaEmitter(Emitter):
    """What a primitive's ``scalar`` rule writes against, for CUDA kernels: numba type
    names (``float32(...)``) and device math functions instead of numpy's."""

    _SPECIAL = {"nan": "math.nan", "inf": "math.inf"}

    def __init__(self, dtype: str):
        super().__init__(dtype)
        self.functions: set = set()   # math functions used (bound in the module prelude)
        self.types: set = set()       # numba type names used in constants and casts

    def _type(self, dt: str) -> str:
        name = NUMBA_TYPE[dt]
        self.types.add(name)
        return name

    def call(self, fn: str, *args) -> str:
        if not self.dtype.startswith("float"):
            if fn == "floor":
                return args[0]  # the floor of an integer is itself
            raise NotImplementedError(f"{fn} on {self.dtype}")
        if fn == "sigmoid":
            one = self.const(1)
            return f"({one} / ({one} + {self.call('exp', f'-{args[0]}')}))"
        if fn not in _DEVICE_MATH:
            raise NotImplementedError(f"no CUDA lowering for math function {fn!r}")
        self.functions.add(fn)
        return f"{fn}({', '.join(args)})"


# ----------------------------------------------------------------------------- the spec


class CudaKernelSpec(KernelSpec):
    """A generated CUDA kernel: its source and what `CudaKernel` needs to launch it.

    ``mode`` is "flat", "nd" or "partial" (a partial reduction); ``reduction`` is None,
    "full" or "partial"; ``flatten[j]`` says whether array argument j is passed as a 1-D
    view and ``contiguous[j]`` whether its declared type is C-contiguous (numba does not
    check arguments against an explicit signature on launch, so `CudaKernel` does);
    ``signatures`` maps each kernel name in the source to its numba signature.
    """

    def __init__(self, source, name, mode, arg_vars, out_vars, red_shape_kind, *, rank, n_mats,
                 reduction, kept, flatten, contiguous, block, acc_dtype, signatures):
        super().__init__(source, name, mode, arg_vars, out_vars, red_shape_kind)
        self.rank = rank
        self.n_inputs = len(arg_vars)
        self.n_mats = n_mats
        self.reduction = reduction
        self.kept = kept
        self.flatten = flatten
        self.contiguous = contiguous
        self.block = block
        self.acc_dtype = acc_dtype
        self.signatures = signatures
        self.finish_name = f"{name}_finish" if reduction == "full" else None


def _acc_dtype(combine: str, dtype: str) -> str:
    if combine in ("add", "mul") and dtype in ("int32", "int64", "bool", "int8", "uint8"):
        return "int64"
    return dtype


def _combine(combine: str, acc: str, r: str) -> list:
    """Statements folding value `r` into `acc` (both simple names or subscripts)."""
    if combine == "add":
        return [f"{acc} += {r}"]
    if combine == "mul":
        return [f"{acc} *= {r}"]
    op = ">" if combine == "max" else "<"
    # nan wins, as in numpy (and the CPU backend): `r != r` is only true for nan.
    return [f"{acc} = {r} if ({r} {op} {acc} or {r} != {r}) else {acc}"]


def _cast_back(x: str, acc_dt: str, dtype: str, em: CudaEmitter) -> str:
    if dtype == acc_dt:
        return x
    if dtype == "bool":
        return f"({x} != 0)"
    return f"{em._type(dtype)}({x})"


def _arr_type(dtype: str, rank: int, contiguous: bool) -> str:
    dims = [":"] * max(rank, 1)
    if contiguous:
        dims[-1] = "::1"
    return f"{NUMBA_TYPE[dtype]}[{', '.join(dims)}]"


def _unflatten(flat: str, dims: list, ind: str) -> list:
    """Lines computing the C-order multi-index ``i<d>`` of `flat` over `dims`."""
    if not dims:
        return []
    if len(dims) == 1:
        return [f"{ind}i{dims[0]} = {flat}"]
    lines = [f"{ind}r = {flat}"]
    for d in reversed(dims[1:]):
        lines.append(f"{ind}i{d} = r % d{d}")
        lines.append(f"{ind}r //= d{d}")
    lines.append(f"{ind}i{dims[0]} = r")
    return lines


def _block_fold(combine: str, acc_dt: str, block: int, ind: str) -> list:
    """Fold each thread's ``acc`` over the block through shared memory into ``buf[0]``."""
    lines = [f"{ind}t = cuda.threadIdx.x",
             f"{ind}buf = cuda.shared.array({block}, {NUMBA_TYPE[acc_dt]})",
             f"{ind}buf[t] = acc",
             f"{ind}cuda.syncthreads()",
             f"{ind}s = {block // 2}",
             f"{ind}while s > 0:",
             f"{ind}    if t < s:"]
    if combine in ("add", "mul"):
        lines.append(f"{ind}        buf[t] {'+' if combine == 'add' else '*'}= buf[t + s]")
    else:
        lines.append(f"{ind}        a = buf[t]")
        lines.append(f"{ind}        b = buf[t + s]")
        lines += [f"{ind}        {x}" for x in _combine(combine, "a", "b")]
        lines.append(f"{ind}        buf[t] = a")
    lines += [f"{ind}    cuda.syncthreads()",
              f"{ind}    s //= 2"]
    return lines


# ----------------------------------------------------------------------------- generation


def generate(group: Group, layouts: tuple, name: str = "kernel", block: int = BLOCK) -> CudaKernelSpec:
    """Source for `group`; `layouts[k]` is "flat", "scalar" or "nd" for input k (as on the CPU)."""
    if block < 2 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 2, got {block}")
    shape = group.shape
    rank = len(shape)
    inputs = list(group.inputs)
    red = group.reduction
    mats = [v for v in group.outputs if red is None or v is not red.out]
    if red is None:
        reduction, rdims = None, ()
    else:
        rdims = tuple(red.params["dims"])
        reduction = "full" if len(rdims) == rank else "partial"
    kept = tuple(d for d in range(rank) if d not in rdims)
    if reduction == "partial":
        mode = "partial"
    elif all(lay in ("flat", "scalar") for lay in layouts):
        mode = "flat"
    else:
        mode = "nd"
    used_types: set = set()
    functions: set = set()
    names = {v: f"x{k}" for k, v in enumerate(inputs)}

    # ---- the per-element computation (the same expressions as the CPU backend) ----
    comp: list = []
    for j, e in enumerate(group.eqns):
        em = CudaEmitter(_compute_dtype(e))
        args = []
        for a in e.inputs:
            if isinstance(a, Literal):
                typed = e.prim.promote or e.prim.name == "where"
                args.append(em.const(a.value, _compute_dtype(e) if typed else a.aval.dtype.name))
            else:
                args.append(names[a])
        if e.prim.name == "expand":
            expr = args[0]  # a broadcast load: the operand is read with broadcast indexing
        else:
            expr = e.prim.scalar(em, *args, **dict(e.params))
        used_types |= em.types
        functions |= em.functions
        names[e.out] = f"v{j}"
        src = f"# {e.prim.name}"
        if e.loc:
            src += f" ({os.path.basename(e.loc[0])}:{e.loc[1]})"
        comp.append(f"v{j} = {expr}  {src}")

    # ---- signature and argument list ----
    flatten: list = []
    sig_args: list = []
    for k, v in enumerate(inputs):
        lay, dt, r = layouts[k], v.aval.dtype.name, len(v.aval.shape)
        if lay == "scalar":
            sig_args.append(_arr_type(dt, 1, True))
            flatten.append(False)
        elif lay == "flat" and mode != "partial":
            sig_args.append(_arr_type(dt, 1, True))
            flatten.append(True)
        else:
            sig_args.append(_arr_type(dt, r, lay == "flat"))
            flatten.append(False)
    for v in mats:
        if mode == "partial":
            sig_args.append(_arr_type(v.aval.dtype.name, rank, True))
            flatten.append(False)
        else:
            sig_args.append(_arr_type(v.aval.dtype.name, 1, True))
            flatten.append(True)
    params = [f"in{k}" for k in range(len(inputs))] + [f"out{m}" for m in range(len(mats))]
    acc_dt = None
    em = CudaEmitter("float32")
    if red is not None:
        combine = red.prim.extra["combine"]
        out_dt = red.out.aval.dtype.name
        acc_dt = _acc_dtype(combine, out_dt)
        init = _init(combine, acc_dt, em)
        rvar = names[red.inputs[0]]
        if reduction == "full":
            sig_args.append(_arr_type(acc_dt, 1, True))   # per-block partials, not the result
            params.append("partial")
            flatten.append(True)
        else:
            sig_args.append(_arr_type(out_dt, len(kept), True))
            params.append("red")
            flatten.append(False)
    dim_names = [f"d{i}" for i in range(rank)]
    params += dim_names
    sig_args += ["int64"] * rank
    sig = f"void({', '.join(sig_args)})"
    signatures = {name: sig}

    # ---- the body ----
    ind = "    "
    body: list = []
    for k in range(len(inputs)):
        if layouts[k] == "scalar":
            body.append(f"{ind}x{k} = in{k}[0]")  # 0-d operands: read once

    def idx_for(v, ivars):
        r = len(v.aval.shape)
        parts = []
        for j, dsz in enumerate(v.aval.shape):
            it = rank - r + j
            if isinstance(dsz, int) and dsz == 1 and not (isinstance(shape[it], int) and shape[it] == 1):
                parts.append("0")
            else:
                parts.append(ivars[it])
        return ", ".join(parts) if parts else "0"

    ivars = [f"i{d}" for d in range(rank)]
    if mode in ("flat", "nd"):
        body.append(f"{ind}n = {' * '.join(dim_names) if dim_names else '1'}")
        if reduction == "full":
            body.append(f"{ind}acc = {init}")
        body.append(f"{ind}for i in range(cuda.grid(1), n, cuda.gridsize(1)):")
        inner = []
        if mode == "nd":
            inner += _unflatten("i", list(range(rank)), "")
        for k, v in enumerate(inputs):
            if layouts[k] == "flat":
                inner.append(f"x{k} = in{k}[i]")
            elif layouts[k] == "nd":
                inner.append(f"x{k} = in{k}[{idx_for(v, ivars)}]")
        inner += comp
        inner += [f"out{m}[i] = {names[v]}" for m, v in enumerate(mats)]
        if reduction == "full":
            inner += _combine(combine, "acc", rvar)
        body += [ind * 2 + s for s in inner]
        if reduction == "full":
            body += _block_fold(combine, acc_dt, block, ind)
            body.append(f"{ind}if t == 0:")
            body.append(f"{ind * 2}partial[cuda.blockIdx.x] = buf[0]")
    else:
        kn = " * ".join(f"d{d}" for d in kept)
        body.append(f"{ind}m = {kn}")
        body.append(f"{ind}for k in range(cuda.grid(1), m, cuda.gridsize(1)):")
        body += _unflatten("k", list(kept), ind * 2)
        body.append(f"{ind * 2}acc = {init}")
        depth = 2
        for d in rdims:
            body.append(f"{ind * depth}for i{d} in range(d{d}):")
            depth += 1
        inner = []
        full_idx = ", ".join(ivars)
        for k, v in enumerate(inputs):
            if layouts[k] != "scalar":
                inner.append(f"x{k} = in{k}[{idx_for(v, ivars)}]")
        inner += comp
        inner += [f"out{m}[{full_idx}] = {names[v]}" for m, v in enumerate(mats)]
        inner += _combine(combine, "acc", rvar)
        body += [ind * depth + s for s in inner]
        out_idx = ", ".join(f"i{d}" for d in kept)
        body.append(f"{ind * 2}red[{out_idx}] = {_cast_back('acc', acc_dt, out_dt, em)}")

    ops = ", ".join(e.prim.name for e in group.eqns) + (f" -> {red.prim.name}" if red is not None else "")
    lines = [f"@cuda.jit({sig!r}, cache=CACHE)",
             f"def {name}({', '.join(params)}):",
             f'    """fused group {group.gid}: {ops} ({mode})"""'] + body

    if reduction == "full":
        fsig = f"void({_arr_type(acc_dt, 1, True)}, {_arr_type(out_dt, 1, True)}, int64)"
        signatures[f"{name}_finish"] = fsig
        lines += ["", "", f"@cuda.jit({fsig!r}, cache=CACHE)",
                  f"def {name}_finish(partial, red, nparts):",
                  f'    """fold the per-block partials of `{name}` into red[0] (one block)"""',
                  f"    acc = {init}",
                  f"    for j in range(cuda.threadIdx.x, nparts, {block}):"]
        lines += ["        " + s for s in _combine(combine, "acc", "partial[j]")]
        lines += _block_fold(combine, acc_dt, block, "    ")
        lines += ["    if t == 0:",
                  f"        red[0] = {_cast_back('buf[0]', acc_dt, out_dt, em)}"]
    contiguous = [lay != "nd" for lay in layouts] + [True] * (len(flatten) - len(layouts))
    used_types |= em.types
    if acc_dt is not None:
        used_types.add(NUMBA_TYPE[acc_dt])

    header = ["# generated by tracejit (CUDA backend); sizes are arguments, never constants",
              "import math", "", "import numpy as np",
              f"from numba import {', '.join(['cuda'] + sorted(used_types))}"]
    if functions:
        fs = sorted(functions)
        sim = [f for f in fs if f != "erf"]
        header += ["from numba.core import config", "",
                   "if config.ENABLE_CUDASIM:",
                   "    # The simulator runs kernels as Python, where math.* raise on overflow, inf",
                   "    # and domain errors: numpy's ufuncs give the device's special values instead."]
        if sim:
            header.append(f"    {', '.join(sim)} = {', '.join(_SIM_MATH[f] for f in sim)}")
        if "erf" in functions:
            header += ["", "    def erf(x):", "        return type(x)(math.erf(x))"]
        header += ["else:",
                   "    # On the device: libdevice, picked by the argument type (e.g. __nv_expf for float32).",
                   f"    from math import {', '.join(fs)}"]
    source = "\n".join(header + ["", ""] + lines) + "\n"
    red_rank = max(len(kept), 1) if red is not None else 0
    return CudaKernelSpec(source, name, mode, inputs, list(mats) + ([red.out] if red is not None else []),
                          red_rank, rank=rank, n_mats=len(mats), reduction=reduction, kept=kept,
                          flatten=tuple(flatten), contiguous=tuple(contiguous), block=block,
                          acc_dtype=acc_dt, signatures=signatures)


# ----------------------------------------------------------------------------- loading


_lock = threading.RLock()
_memory: dict = {}      # source -> module (simulator / in-memory loads)
_counter = [0]


def _exec_in_memory(source: str, hint: str) -> types.ModuleType:
    with _lock:
        module = _memory.get(source)
        if module is not None:
            return module
        _counter[0] += 1
        modname = f"tracejit_cuda_kernels.{hint}_{_counter[0]}"
        filename = f"<tracejit {modname}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        module = types.ModuleType(modname)
        module.__file__ = filename
        module.CACHE = False
        exec(compile(source, filename, "exec"), module.__dict__)
        _memory[source] = module
        return module


def _load_module(source: str, hint: str = "cuda_kernel") -> types.ModuleType:
    if simulator_enabled():
        return _exec_in_memory(source, hint)
    from numba import cuda
    from . import diskcache
    cc = cuda.get_current_device().compute_capability
    # The compiled code depends on the GPU: put it in the source, so it is in the cache key.
    tagged = f"# target: cuda sm_{cc[0]}{cc[1]}\n" + source
    return diskcache.load_module(tagged, name_hint=hint)


def load(spec: CudaKernelSpec, hint: str = "cuda_kernel") -> "CudaKernel":
    """Compile `spec` (once per source per process; on a GPU also through the disk cache)."""
    return CudaKernel(spec, _load_module(spec.source, hint))


# ----------------------------------------------------------------------------- launching


_streams: dict = {}
_max_blocks_cache: dict = {}


def _resolve_stream(stream):
    """A numba stream for `stream`: None -> cupy's current stream; a cupy Stream, a raw
    pointer or a numba stream are accepted. The simulator takes 0."""
    if simulator_enabled():
        return 0
    from numba import cuda
    if stream is None:
        cp = sys.modules["tracejit.device"]._cupy  # (tracejit.device is also the class)
        ptr = cp.cuda.get_current_stream().ptr if cp is not None else 0
    elif hasattr(stream, "handle") and not hasattr(stream, "ptr"):
        return stream  # already a numba stream
    else:
        ptr = int(getattr(stream, "ptr", stream))
    if ptr == 0:
        return cuda.default_stream()  # the legacy default stream, cupy's null stream
    s = _streams.get(ptr)
    if s is None:
        s = _streams[ptr] = cuda.external_stream(ptr)
    return s


def _max_blocks() -> int:
    """Blocks for a grid-stride loop: enough to fill the GPU a few times over."""
    if simulator_enabled():
        return 2  # the simulator runs a Python thread per CUDA thread: keep grids small
    from numba import cuda
    dev = cuda.get_current_device()
    n = _max_blocks_cache.get(dev.id)
    if n is None:
        n = _max_blocks_cache[dev.id] = dev.MULTIPROCESSOR_COUNT * 32
    return n


def _grid(work: int, block: int) -> int:
    return max(1, min(-(-work // block), _max_blocks()))


def _contiguous(shape, strides, itemsize) -> bool:
    if strides is None or 0 in shape:
        return True
    expect = itemsize
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def _kernel_array(a, flat: bool, contiguous: bool | None = None):
    """`a` as a kernel argument: device arrays (cupy, anything with the CUDA array
    interface) become numba device views without a host sync (we launch on the stream
    that produced them); `flat` arguments are viewed as 1-D. Both flat and `contiguous`
    arguments must be in C order (the kernel's signature says so)."""
    contiguous = flat if contiguous is None else contiguous or flat
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:  # host arrays: the simulator (on a GPU numba would copy them)
        if contiguous and not a.flags.c_contiguous:
            raise ValueError(f"kernel argument of shape {a.shape} must be C-contiguous")
        return a.reshape(-1) if flat and a.ndim != 1 else a
    cai = dict(cai)
    # No stream: numba would wrap (and with sync=True wait on) it for every argument; the
    # kernel is ordered after the array's producers by running on the same stream.
    cai.pop("stream", None)
    shape = tuple(cai["shape"])
    if contiguous and not _contiguous(shape, cai.get("strides"), np.dtype(cai["typestr"]).itemsize):
        raise ValueError(f"kernel argument of shape {shape} must be C-contiguous")
    if flat:
        cai["shape"], cai["strides"] = (math.prod(shape),), None
    from numba import cuda
    return cuda.from_cuda_array_interface(cai, owner=a, sync=False)


def launch(kernel, n_elements: int, *args, block: int = BLOCK, stream=None) -> None:
    """Launch a numba CUDA kernel written as a grid-stride loop over `n_elements`.

    Picks the grid (enough blocks to cover `n_elements`, at most a few waves of the
    GPU), converts device arrays without a host sync, and launches on `stream` (None:
    cupy's current stream). Nothing is launched for 0 elements.
    """
    if n_elements <= 0:
        return
    args = [_kernel_array(a, False) if hasattr(a, "shape") else a for a in args]
    kernel[_grid(n_elements, block), block, _resolve_stream(stream)](*args)


class CudaKernel:
    """A loaded CUDA kernel, called like a CPU kernel (see the module docstring)."""

    def __init__(self, spec: CudaKernelSpec, module: types.ModuleType):
        self.spec = spec
        self.module = module
        self.fn = getattr(module, spec.name)
        self.finish = getattr(module, spec.finish_name) if spec.finish_name else None
        self.n_arrays = spec.n_inputs + spec.n_mats + (1 if spec.reduction else 0)

    def __call__(self, *args, stream=None) -> None:
        spec = self.spec
        if len(args) != self.n_arrays + spec.rank:
            raise TypeError(f"kernel takes {self.n_arrays} arrays and {spec.rank} dims, got {len(args)} arguments")
        arrays, dims = args[:self.n_arrays], [int(d) for d in args[self.n_arrays:]]
        n = math.prod(dims)
        block = spec.block
        work = math.prod(dims[d] for d in spec.kept) if spec.reduction == "partial" else n
        if work == 0 and spec.reduction != "full":
            return  # nothing to compute (a full reduction of nothing still writes its init)
        s = _resolve_stream(stream)
        kargs = [_kernel_array(a, f, c) for a, f, c in zip(arrays, spec.flatten, spec.contiguous)]
        if spec.reduction == "full":
            # Per-block partials, then one block folds them: deterministic, nan-correct.
            grid = _grid(n, block)
            red = arrays[-1]
            xp = _array_module_of(red)
            partial = xp.empty(grid, dtype=np.dtype(spec.acc_dtype))
            kargs[-1] = _kernel_array(partial, True)
            self.fn[grid, block, s](*kargs, *dims)
            self.finish[1, block, s](kargs[-1], _kernel_array(red, True), grid)
            return
        self.fn[_grid(work, block), block, s](*kargs, *dims)


def _array_module_of(a):
    if hasattr(a, "__cuda_array_interface__"):
        from ..device import cupy_module
        return cupy_module()
    return np


# ----------------------------------------------------------------------------- reference driver


def _layouts(group: Group, arrays: list) -> tuple:
    """The operand layouts a plan passes (as plan.py decides them for the CPU)."""
    out = []
    for v, a in zip(group.inputs, arrays):
        if len(v.aval.shape) == 0:
            out.append("scalar")
        elif tuple(a.shape) == tuple(group.shape) and a.flags.c_contiguous:
            out.append("flat")
        else:
            out.append("nd")
    return tuple(out)


def run_group(group: Group, env: dict, xp=np, stream=None, block: int = BLOCK) -> None:
    """Run `group` on the arrays in `env` (Var -> array) and store its outputs there.

    The reference for how a plan calls a CUDA kernel (static shapes only): layouts,
    output allocation, argument order, reshapes after the call.
    """
    shape = tuple(int(d) for d in group.shape)
    rank = len(shape)
    arrays = [env[v] for v in group.inputs]
    layouts = _layouts(group, arrays)
    kernel = load(generate(group, layouts, "kernel", block=block))
    call = [a.reshape(1) if lay == "scalar" else a for a, lay in zip(arrays, layouts)]
    red = group.reduction
    mats = [v for v in group.outputs if red is None or v is not red.out]
    outs = []
    for v in mats:
        buf = xp.empty(shape if rank else (1,), dtype=v.aval.dtype.np)
        outs.append(buf)
        call.append(buf)
    if red is not None:
        kept = [shape[d] for d in range(rank) if d not in red.params["dims"]]
        rbuf = xp.empty(tuple(kept) if kept else (1,), dtype=red.out.aval.dtype.np)
        call.append(rbuf)
    kernel(*call, *shape, stream=stream)
    for v, buf in zip(mats, outs):
        env[v] = buf.reshape(()) if rank == 0 else buf
    if red is not None:
        env[red.out] = rbuf.reshape(tuple(int(d) for d in red.out.aval.shape))


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
    """PTX of each kernel in `spec` for compute capability `cc`: name -> text.

    Needs NVVM (a CUDA toolkit), not a GPU; not available under the simulator. Used to
    check what the device compiler makes of a generated source (no float64 in float32
    kernels, the libdevice calls chosen) on machines without a GPU.
    """
    if simulator_enabled():
        raise RuntimeError("compile_ptx needs numba's real CUDA target, not the simulator")
    from numba import cuda
    namespace = {"CACHE": False, "__name__": "tracejit_cuda_ptx"}
    exec(compile(_DECORATOR.sub("", spec.source), "<tracejit cuda ptx>", "exec"), namespace)
    return {name: cuda.compile_ptx(namespace[name], sig, cc=cc)[0] for name, sig in spec.signatures.items()}
