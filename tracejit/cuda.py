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

from . import amp as _amp
from .device import CudaUnavailableError, as_device, cupy_module

__all__ = ["is_available", "device_count", "current_device", "synchronize", "get_device_name",
           "CudaUnavailableError", "amp"]

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
    cp = cupy_module()
    name = cp.cuda.runtime.getDeviceProperties(_index(device))["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def synchronize(device=None) -> None:
    """Wait until all work queued on the GPU (every stream) has finished."""
    cp = cupy_module()
    with cp.cuda.Device(_index(device)):
        cp.cuda.Device().synchronize()


# ``torch.cuda.amp`` and the legacy ``torch.cuda.FloatTensor``-style types (see
# tracejit/amp and tracejit/legacy_types.py): programs name them even when they then pick
# the CPU ones.
def _amp_module():
    import types

    from . import amp as _amp
    m = types.ModuleType("tracejit.cuda.amp", "tracejit.cuda.amp: autocast and GradScaler (tracejit.amp).")
    m.autocast = lambda enabled=True, dtype=None, cache_enabled=None: _amp.autocast(  # noqa: E731
        "cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    m.GradScaler = lambda *a, **k: _amp.GradScaler("cuda", *a, **k)  # noqa: E731
    return m


amp = _amp_module()
from .legacy_types import cuda_types as _cuda_types  # noqa: E402
globals().update(_cuda_types())
