"""Devices and the array module behind each.

CPU tensors hold numpy arrays; CUDA tensors hold cupy arrays. Op implementations are
written against the "array module" ``xp`` they are handed, so one implementation
serves both. cupy is imported only when a CUDA device is first asked for, and a
missing GPU or missing cupy gives one clear error instead of an import traceback.
"""
from __future__ import annotations

import numpy as np
from .errors import ArgumentError

__all__ = ["device", "as_device", "array_module", "module_of", "CPU", "CudaUnavailableError"]


class CudaUnavailableError(RuntimeError, AssertionError):
    """Raised when a CUDA device is requested but cupy or a GPU is missing (an
    AssertionError too, as PyTorch's "Torch not compiled with CUDA enabled")."""


class device:
    """A device: ``device("cpu")``, ``device("cuda")``, ``device("cuda:1")``, ``device("cuda", 1)``."""

    __slots__ = ("type", "index")

    def __new__(cls, spec="cpu", index: int | None = None):
        if isinstance(spec, device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        kind, _, idx = spec.partition(":")
        if kind not in ("cpu", "cuda", "meta"):
            raise ArgumentError(f"unknown device type {kind!r} in {spec!r} (expected 'cpu', 'cuda' or 'meta')")
        if idx:
            if not idx.isdigit():
                raise ValueError(f"bad device index in {spec!r}")
            index = int(idx)
        if kind != "cuda":
            index = None
        elif index is None:
            index = 0
        key = (kind, index)
        cached = _CACHE.get(key)
        if cached is not None:
            return cached
        self = object.__new__(cls)
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "index", index)
        _CACHE[key] = self
        return self

    def __setattr__(self, k, v):
        raise AttributeError("device is immutable")

    def __repr__(self) -> str:
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (ValueError, TypeError):
                return False
        return self is other

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))

    # ``with torch.device("cpu"):``: the default device inside the block, as
    # set_default_device (which refuses a GPU) sets it
    def __enter__(self) -> "device":
        before = _DEVICE[0]
        set_default_device(self)
        _ENTERED.append(before)
        return self

    def __exit__(self, *exc) -> None:
        _DEVICE[0] = _ENTERED.pop()


_ENTERED: list = []   # the default devices the open ``with device`` blocks replaced
_DEVICE = [None]      # the default device set_default_device set (None: the CPU)


def set_default_device(device) -> None:
    """Set the device factory functions use by default. Only the CPU (or None, the same) can
    be the default here: for a GPU pass ``device=`` to the factory functions."""
    dev = None if device is None else as_device(device)
    if dev is not None and dev.type != "cpu":
        raise NotImplementedError(f"set_default_device({str(device)!r}): only the CPU can be the default "
                                  f"device; pass device= to factory functions (or .to({str(device)!r}))")
    _DEVICE[0] = dev


def get_default_device():
    return _DEVICE[0] if _DEVICE[0] is not None else as_device("cpu")


_CACHE: dict = {}
CPU = device("cpu")
META = device("meta")


def as_device(d) -> device:
    """The device tensors are made on for `d`. "meta" (PyTorch's storage-free device, for
    building a model before loading its weights) is the CPU here: tensors have no
    storage-free form, so a meta tensor is an uninitialized CPU one, and ``to_empty`` or
    ``load_state_dict(assign=True)`` then work as on PyTorch (without its memory saving)."""
    if d is None:
        return CPU
    if isinstance(d, int):
        return device("cuda", d)
    d = device(d)
    return CPU if d is META else d


_cupy = None
_cupy_error: str | None = None  # why cupy is unusable, once we know (not retried: imports are slow)
_gpu_count = 0


def cupy_module():
    """Import cupy on first use, turning every way it can fail into one clear error."""
    global _cupy, _cupy_error, _gpu_count
    if _cupy is not None:
        return _cupy
    if _cupy_error is None:
        _cupy_error = _probe_cupy()
    if _cupy_error:
        raise CudaUnavailableError(_cupy_error) from None
    return _cupy


def _probe_cupy() -> str:
    """Import cupy and count GPUs; returns "" on success, else what is missing."""
    global _cupy, _gpu_count
    try:
        import cupy  # noqa: PLC0415 - optional dependency, imported on demand
    except Exception as e:  # ImportError, or a broken CUDA install raising at import
        return ("CUDA was requested but cupy is not importable "
                f"({type(e).__name__}: {e}). Install the extra: pip install -e '.[cuda]' (in the tracejit checkout)")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"CUDA was requested but no usable GPU was found ({type(e).__name__}: {e})"
    if n == 0:
        return "CUDA was requested but no GPU is present"
    _cupy, _gpu_count = cupy, int(n)
    return ""


def array_module(dev: device):
    """numpy for the CPU, cupy for CUDA devices."""
    if dev.type == "cpu":
        return np
    cp = cupy_module()
    if dev.index >= _gpu_count:
        raise CudaUnavailableError(
            f"device {dev} was requested but only {_gpu_count} GPU(s) are present") from None
    return cp


def module_of(a):
    """The array module holding array `a`: numpy, or cupy for a device array."""
    return np if isinstance(a, np.ndarray) else array_module(device_of_array(a))


def device_of_array(a) -> device:
    if isinstance(a, np.ndarray) or np.isscalar(a):
        return CPU
    if _cupy is not None and isinstance(a, _cupy.ndarray):
        return device("cuda", a.device.id)
    return CPU
