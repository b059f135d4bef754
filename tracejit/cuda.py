"""``tracejit.cuda``: is there a GPU, which one, and waiting for it.

CUDA tensors hold cupy arrays and every kernel (cupy's and tracejit's fused ones)
runs on cupy's current stream, so "the GPU" here is what cupy sees. Nothing here
imports cupy before it is asked a question, and asking never raises for a machine
without cupy or a GPU: `is_available` says False and `device_count` says 0. The calls
that need a device (`synchronize`, `current_device`, `get_device_name`) raise one
`tracejit.device.CudaUnavailableError` that says what is missing.

numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) is not a device for tensors: it
only runs generated kernels on host arrays in tests, so it does not make
`is_available` True.
"""
from __future__ import annotations

import contextlib

from . import amp as _amp
from ._path_modules import path_module as _path_module
from .device import CudaUnavailableError, as_device, cupy_module
from .errors import OutOfMemoryError  # noqa: F401

__all__ = ["is_available", "device_count", "current_device", "synchronize", "get_device_name",
           "CudaUnavailableError", "amp", "manual_seed", "manual_seed_all", "seed", "seed_all", "empty_cache",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "set_device", "get_device_properties", "get_device_capability",
           "is_bf16_supported", "is_initialized", "OutOfMemoryError", "Event", "Stream", "stream",
           "current_stream", "device", "nvtx", "reset_max_memory_allocated", "reset_max_memory_cached",
           "reset_accumulated_memory_stats", "memory_cached", "max_memory_cached", "memory_stats", "memory_summary",
           "mem_get_info", "set_per_process_memory_fraction", "ipc_collect", "get_arch_list"]

amp = _amp.device_module("cuda")
__path__: list = []   # (a package to the import system, so ``import torch.cuda.amp`` finds amp)


def is_available() -> bool:
    """True when cupy imports and sees at least one GPU."""
    try:
        cupy_module()
    except CudaUnavailableError:
        return False
    return True


def device_count() -> int:
    """Number of GPUs cupy sees (0 without cupy or a GPU)."""
    try:
        cp = cupy_module()
    except CudaUnavailableError:
        return 0
    return int(cp.cuda.runtime.getDeviceCount())


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = as_device(device)
    if d.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {d}")
    return d.index


def current_device() -> int:
    """Index of cupy's current GPU."""
    cp = cupy_module()
    return int(cp.cuda.Device().id)


def get_device_name(device=None) -> str:
    """The GPU's name, e.g. 'NVIDIA H100 80GB HBM3'."""
    return get_device_properties(device).name


def synchronize(device=None) -> None:
    """Wait until all work queued on the GPU (every stream) has finished."""
    cp = cupy_module()
    with cp.cuda.Device(_index(device)):
        cp.cuda.Device().synchronize()


# What seed utilities, logging and timing code call whether or not a GPU is there: as
# PyTorch's, they do nothing (seeds, caches) or say 0 (memory) without one.
def _cupy_if_loaded():
    import sys
    return sys.modules["tracejit.device"]._cupy


def manual_seed(seed: int) -> None:
    """Seed the GPU's generator (cupy's, once it is in use); nothing without a GPU."""
    from .generator import seed_value
    cp = _cupy_if_loaded()
    if cp is not None:
        cp.random.seed(seed_value(seed) % 2 ** 32)


manual_seed_all = manual_seed


def seed() -> None:
    import random
    manual_seed(random.getrandbits(32))


seed_all = seed


def empty_cache() -> None:
    """Hand cupy's cached free blocks back to the GPU."""
    cp = _cupy_if_loaded()
    if cp is not None:
        cp.get_default_memory_pool().free_all_blocks()


def memory_allocated(device=None) -> int:
    """Bytes held by tensors on the GPU (cupy's pool), 0 without one."""
    cp = _cupy_if_loaded()
    return int(cp.get_default_memory_pool().used_bytes()) if cp is not None else 0


def memory_reserved(device=None) -> int:
    cp = _cupy_if_loaded()
    return int(cp.get_default_memory_pool().total_bytes()) if cp is not None else 0


# (cupy keeps no peaks: the current figures stand in for them)
max_memory_allocated, max_memory_reserved = memory_allocated, memory_reserved


def reset_peak_memory_stats(device=None) -> None:
    """Nothing to reset (see max_memory_allocated)."""


reset_max_memory_allocated = reset_max_memory_cached = reset_accumulated_memory_stats = reset_peak_memory_stats
memory_cached, max_memory_cached = memory_reserved, max_memory_reserved   # (torch's older names)


def memory_stats(device=None) -> dict:
    """The pool's figures under torch's keys ({} without a GPU, as torch's before CUDA starts)."""
    if _cupy_if_loaded() is None:
        return {}
    used, held = memory_allocated(device), memory_reserved(device)
    return {"allocated_bytes.all.current": used, "allocated_bytes.all.peak": used,
            "reserved_bytes.all.current": held, "reserved_bytes.all.peak": held}


def memory_summary(device=None, abbreviated: bool = False) -> str:
    return "\n".join(f"{k}: {v}" for k, v in memory_stats(device).items()) or "no GPU memory in use"


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the GPU; raises CudaUnavailableError without one."""
    return tuple(int(b) for b in cupy_module().cuda.runtime.memGetInfo())


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap cupy's pool at `fraction` of the GPU's memory."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"set_per_process_memory_fraction: fraction must be in [0, 1], got {fraction!r}")
    cupy_module().get_default_memory_pool().set_limit(fraction=fraction)


def ipc_collect() -> None:
    """Memory shared between processes is freed with its tensors here: nothing to collect."""


def get_arch_list() -> list:
    """The GPU architectures of compiled kernels: tracejit compiles for the GPU it runs on."""
    return []


def set_device(device) -> None:
    cupy_module().cuda.Device(_index(device)).use()


def get_device_properties(device=None):
    """The GPU's name, total_memory, major, minor and multi_processor_count."""
    import types
    p = cupy_module().cuda.runtime.getDeviceProperties(_index(device))
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return types.SimpleNamespace(name=name, total_memory=int(p["totalGlobalMem"]), major=int(p["major"]),
                                 minor=int(p["minor"]), multi_processor_count=int(p["multiProcessorCount"]))


def get_device_capability(device=None) -> tuple:
    p = get_device_properties(device)
    return p.major, p.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return is_available() and get_device_capability()[0] >= 8


def is_initialized() -> bool:
    return _cupy_if_loaded() is not None and is_available()


class Stream:
    """cupy's current stream stands for every stream: work is already ordered on it."""

    def __init__(self, device=None, priority: int = 0):
        self.device = device

    def synchronize(self) -> None:
        synchronize()

    def wait_stream(self, stream) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def query(self) -> bool:
        return True


def current_stream(device=None) -> Stream:
    return Stream(device)


class stream:  # noqa: N801  (PyTorch's name)
    """``with torch.cuda.stream(s):``: the work stays on cupy's current stream."""

    def __init__(self, s):
        self.stream = s

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc) -> None:
        pass


class device:  # noqa: N801  (PyTorch's name)
    """``with torch.cuda.device(i):``: GPU i is cupy's current device inside."""

    def __init__(self, index):
        self.index = index
        self._ctx = None

    def __enter__(self):
        if self.index is not None and (not isinstance(self.index, int) or self.index >= 0):
            self._ctx = cupy_module().cuda.Device(_index(self.index))
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


class Event:
    """A point in time: `record` it (after the GPU's queued work), then
    ``start.elapsed_time(end)`` gives the milliseconds between two."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing, self._t = enable_timing, None

    def record(self, stream=None) -> None:
        import time
        if is_initialized():
            synchronize()
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    wait = synchronize

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._t - self._t) * 1000.0


nvtx = _path_module("tracejit.cuda.nvtx", "``torch.cuda.nvtx``: profiler ranges, no-ops here.",
                    {"range_push": lambda msg: 0, "range_pop": lambda: 0, "mark": lambda msg: None,
                     "range": lambda msg, *args, **kwargs: contextlib.nullcontext()})


# the legacy ``torch.cuda.FloatTensor``-style types (tracejit/legacy_types.py): programs
# name them even when they then pick the CPU ones
from .legacy_types import cuda_types as _cuda_types  # noqa: E402
globals().update(_cuda_types())
