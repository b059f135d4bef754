"""Loading and launching the CUDA backend's kernels (numba CUDA): what codegen_cuda renders.

`load` compiles a rendered spec once per source per process and returns a `CudaKernel`,
which takes the nest's calling convention, views "flat" operands as 1-D, checks the
declared contiguity (numba does not on launch), picks the grid and launches on cupy's
current stream. A full reduction is two launches: per-block partials, then one fold.
"""
from __future__ import annotations

import math
import sys
import threading
import types

import numpy as np

from ..device import module_of

__all__ = ["simulator_enabled", "numpy_compat", "load", "launch", "CudaKernel", "BLOCK"]

BLOCK = 256  # threads per block; reductions fold one block through shared memory of this size
ROW_BLOCKS = 65535  # most blocks of a rows kernel (a block per row; past it, blocks stride)


def simulator_enabled() -> bool:
    """True when numba's CUDA target is the simulator (``NUMBA_ENABLE_CUDASIM=1`` at import)."""
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


def numpy_compat() -> None:
    """Give numpy the names numba-cuda's target registers overloads for and NumPy 2.5
    removed (numba-cuda 0.30 imports `np.row_stack`, now `np.vstack`): without them the
    first kernel compile fails inside numba-cuda on an AttributeError."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack


# ----------------------------------------------------------------------------- loading


_lock = threading.RLock()
_memory: dict = {}      # source -> module (simulator / in-memory loads)
_counter = [0]


def _exec_in_memory(source: str, hint: str) -> types.ModuleType:
    from .diskcache import _exec_module
    with _lock:
        module = _memory.get(source)
        if module is None:
            _counter[0] += 1
            modname = f"tracejit_cuda_kernels.{hint}_{_counter[0]}"
            module = _memory[source] = _exec_module(source, modname, f"<tracejit {modname}>", cache=False)
        return module


def _load_module(source: str, hint: str = "cuda_kernel") -> types.ModuleType:
    numpy_compat()
    if simulator_enabled():
        return _exec_in_memory(source, hint)
    from numba import cuda
    from . import diskcache
    cc = cuda.get_current_device().compute_capability
    # The compiled code depends on the GPU: put it in the source, so it is in the cache key.
    tagged = f"# target: cuda sm_{cc[0]}{cc[1]}\n" + source
    return diskcache.load_module(tagged, name_hint=hint)


def load(spec, hint: str = "cuda_kernel") -> "CudaKernel":
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
    """`a` as a kernel argument: device arrays become numba device views without a host
    sync; `flat` arguments are viewed as 1-D. Flat and `contiguous` ones must be C order."""
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
    """Launch a numba CUDA kernel written as a grid-stride loop over `n_elements`: a grid of
    a few waves at most, on `stream` (None: cupy's current one); nothing for 0 elements."""
    if n_elements <= 0:
        return
    args = [_kernel_array(a, False) if hasattr(a, "shape") else a for a in args]
    kernel[_grid(n_elements, block), block, _resolve_stream(stream)](*args)


class CudaKernel:
    """A loaded CUDA kernel, called with its nest's calling convention (see the module docstring)."""

    def __init__(self, spec, module: types.ModuleType):
        self.spec = spec
        self.module = module
        self.fn = getattr(module, spec.name)
        self.finish = getattr(module, spec.finish_name) if spec.finish_name else None
        self.n_arrays = len(spec.flatten)
        self.n_sizes = len(spec.nest.sizes)
        # on a GPU, launched past numba's dispatcher (cuda_direct); None: the dispatcher
        self.direct = self.direct_finish = None
        if not simulator_enabled() and _DIRECT[0]:
            from .cuda_direct import direct
            self.direct = direct(self.fn)
            self.direct_finish = direct(self.finish) if self.finish is not None else None
            if self.direct is None or (self.finish is not None and self.direct_finish is None):
                self.direct = self.direct_finish = None

    def __call__(self, *args, stream=None) -> None:
        spec = self.spec
        if len(args) != self.n_arrays + self.n_sizes:
            raise TypeError(f"kernel takes {self.n_arrays} arrays and {self.n_sizes} sizes "
                            f"({', '.join(spec.nest.sizes)}), got {len(args)} arguments")
        arrays, dims = args[:self.n_arrays], [int(d) for d in args[self.n_arrays:]]
        n = math.prod(dims)
        work = math.prod(dims[d] for d in spec.kept) if spec.reduction == "partial" else n
        if work == 0 and spec.reduction != "full" and spec.mode not in ("rows", "channels"):
            return  # nothing to compute (a full reduction of nothing still writes its init)
        s = _resolve_stream(stream)
        direct = self.direct is not None and all(
            hasattr(a, "__cuda_array_interface__") for a in arrays)
        if direct:
            try:
                return self._launch(True, arrays, dims, n, work, s)
            except TypeError as e:
                # cuda.core refused what the direct launch hands it (another version's
                # rules): the dispatcher launches this kernel from now on, and again now
                # (a launch is idempotent: its outputs are written whole)
                _refused(self, e)
        self._launch(False, arrays, dims, n, work, s)

    def _launch(self, direct: bool, arrays, dims: list, n: int, work: int, s) -> None:
        spec = self.spec
        block = spec.block
        arg = _direct_arg if direct else _kernel_array
        kargs = [arg(a, f, c) for a, f, c in zip(arrays, spec.flatten, spec.contiguous)]
        if spec.reduction == "full":
            # Per-block partials, then one block folds them: deterministic, nan-correct.
            grid = _grid(n, block)
            red = arrays[-1]
            xp = module_of(red)
            partial = xp.empty(grid, dtype=np.dtype(spec.acc_dtype))
            kargs[-1] = arg(partial, True)
            self._go(direct, grid, block, s, *kargs, *dims)
            self._go(direct, 1, block, s, kargs[-1], arg(red, True), grid, finish=True)
            return
        if spec.mode in ("rows", "channels"):
            # a block per row or channel, striding past the cap; an empty one still writes
            # its reductions' initial values
            rows = dims[1] if spec.mode == "channels" else math.prod(dims[:-1])
            if rows:
                self._go(direct, min(rows, ROW_BLOCKS), block, s, *kargs, *dims)
            return
        self._go(direct, _grid(work, block), block, s, *kargs, *dims)

    def _go(self, direct: bool, grid: int, block: int, stream, *args, finish: bool = False) -> None:
        if direct:
            (self.direct_finish if finish else self.direct)(grid, block, stream, *args)
        else:
            (self.finish if finish else self.fn)[grid, block, stream](*args)


# whether kernels launch past numba's dispatcher (off once cuda.core refuses a launch)
_DIRECT = [True]


def _refused(kernel: CudaKernel, e: TypeError) -> None:
    import warnings
    if _DIRECT[0]:
        warnings.warn(f"tracejit: CUDA kernels launch through numba's dispatcher from now on "
                      f"(cuda.core refused a direct launch: {e})", RuntimeWarning, stacklevel=3)
    _DIRECT[0] = False
    kernel.direct = kernel.direct_finish = None


def _direct_arg(a, flat: bool, contiguous: bool | None = None):
    """`a` as a direct launch's argument (cuda_direct): checked as `_kernel_array` checks."""
    from .cuda_direct import FlatView
    if (flat or contiguous) and not _c_contiguous(a):
        raise ValueError(f"kernel argument of shape {tuple(a.shape)} must be C-contiguous")
    return FlatView(a) if flat else a


def _c_contiguous(a) -> bool:
    flags = getattr(a, "flags", None)
    if flags is not None:
        return bool(flags.c_contiguous)
    cai = a.__cuda_array_interface__
    return _contiguous(tuple(cai["shape"]), cai.get("strides"), np.dtype(cai["typestr"]).itemsize)

