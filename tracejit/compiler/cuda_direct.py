"""Launching a compiled numba-cuda kernel without numba's dispatcher.

numba's ``kernel[grid, block, stream](*args)`` types every argument, wraps each device
array in a numba view and builds a launch configuration on every call: on an H200 about
60 us a launch with the views made ahead, 300 us with them made per call, against 11 us
for a cupy ufunc. A kernel rendered by tracejit has one signature, fixed when it is
compiled, so its arguments can be packed once per call the way numba's own launch packs
them (an array as meminfo, parent, size, itemsize, data pointer, shape, strides; a scalar
as its ctypes value) and handed to cuda.core's launch, as numba itself does last.

`direct(dispatcher)` returns such a launcher, or None where the installed numba-cuda
does not offer what it reads (then the dispatcher launches, as before).
"""
from __future__ import annotations

import ctypes
import math
from typing import Callable, Optional

__all__ = ["direct", "DirectKernel"]

_SCALARS = {"int64": ctypes.c_int64, "int32": ctypes.c_int32, "uint64": ctypes.c_uint64,
            "uint32": ctypes.c_uint32, "float32": ctypes.c_float, "float64": ctypes.c_double}


class DirectKernel:
    """One compiled kernel, launched as ``k(grid, block, stream, *args)``."""

    def __init__(self, library, kinds: list, launch: Callable, config: Callable):
        self.library = library    # numba's code library: the kernel of the current device
        self.kinds = kinds        # per argument: an array's ndim, or a scalar's ctypes type
        self._launch = launch
        self._config = config
        self._configs: dict = {}

    def __call__(self, grid: int, block: int, stream, *args) -> None:
        self._launch(stream, self.config(grid, block), self.library.get_cufunc().kernel,
                     *self.pack(*args))

    def pack(self, *args) -> list:
        """The kernel's parameters for `args`, as numba-cuda's launch packs them."""
        params = []
        add = params.append
        for kind, a in zip(self.kinds, args):
            if kind.__class__ is int:
                shape, strides = tuple(a.shape), tuple(a.strides)
                if len(shape) != kind:
                    raise ValueError(f"kernel argument of shape {shape}: expected {kind} dims")
                add(0)                  # meminfo
                add(0)                  # parent
                add(math.prod(shape))
                add(a.dtype.itemsize)
                add(_pointer(a))
                params.extend(shape)
                params.extend(strides)
            else:
                add(kind(a))
        return params

    def config(self, grid: int, block: int):
        """cuda.core's launch configuration for a 1-D grid, made once per (grid, block)."""
        cfg = self._configs.get((grid, block))
        if cfg is None:
            cfg = self._configs[grid, block] = self._config(grid=(grid, 1, 1), block=(block, 1, 1),
                                                            shmem_size=0)
        return cfg


class FlatView:
    """A C-contiguous device array seen as 1-D (what a "flat" kernel argument takes)."""

    __slots__ = ("array", "dtype", "shape", "strides")

    def __init__(self, array):
        self.array = array
        self.dtype = array.dtype
        self.shape = (math.prod(array.shape),)
        self.strides = (array.dtype.itemsize,)


def _pointer(a) -> int:
    if isinstance(a, FlatView):
        a = a.array
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)     # cupy
    if ptr is not None:
        return ptr
    return a.__cuda_array_interface__["data"][0]


def direct(dispatcher) -> Optional[DirectKernel]:
    """A `DirectKernel` for a numba-cuda dispatcher compiled for exactly one signature,
    or None where this numba-cuda keeps its compiled kernel elsewhere."""
    try:
        from cuda.core import LaunchConfig, launch
        (compiled,) = dispatcher.overloads.values()
        library = compiled._codelibrary
        library.get_cufunc().kernel   # (loaded now: a failure here leaves the dispatcher)
        kinds = []
        for t in compiled.argument_types:
            ndim = getattr(t, "ndim", None)
            if ndim is not None and hasattr(t, "layout"):
                kinds.append(int(ndim))
            else:
                kinds.append(_SCALARS[str(t)])
    except Exception:  # noqa: BLE001 - another numba-cuda: its dispatcher launches
        return None
    return DirectKernel(library, kinds, launch, LaunchConfig)
