"""``torch.*`` names of older and library code that need no op of their own: ``range``,
``asarray``, ``frombuffer``, ``adjoint``, ``embedding`` (weight first), ``split_with_sizes``, the torch namespace's
autocast queries, the symbolic-size helpers (``sym_int``, ``SymInt``) and
``OutOfMemoryError``."""
from __future__ import annotations

import math
import operator
import warnings
from typing import Any

import numpy as np

from . import dtypes as _dt
from . import ops as _ops
from .errors import OutOfMemoryError  # noqa: F401
from .shapes import Sym
from .tensor import Tensor

__all__ = ["range", "asarray", "frombuffer", "adjoint", "embedding", "split_with_sizes", "unsafe_chunk", "unsafe_split",
           "constant_pad_nd", "is_neg", "is_inference", "is_storage", "is_autocast_enabled", "is_autocast_cpu_enabled",
           "get_autocast_dtype", "get_autocast_cpu_dtype", "get_autocast_gpu_dtype", "OutOfMemoryError",
           "SymInt", "SymFloat", "SymBool", "sym_int", "sym_float", "sym_max", "sym_min", "sym_not", "sym_ite",
           "sym_sqrt", "sym_sum", "get_device_module"]


def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False):  # noqa: A001
    """The deprecated ``torch.range``: `start` to `end` *inclusive* by `step`, of the
    default float dtype unless `dtype` says otherwise."""
    warnings.warn("torch.range is deprecated and will be removed in a future release because its behavior is "
                  "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values "
                  "in [start, end).", UserWarning, stacklevel=2)
    if end is None:
        raise TypeError("range() missing 1 required positional argument: 'end'")
    if step == 0:
        raise ValueError("range: step must be nonzero")
    n = math.floor((float(end) - float(start)) / float(step)) + 1
    if n < 0:
        raise ValueError(f"range: upper bound and larger bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    values = float(start) + np.arange(n, dtype=np.float64) * float(step)
    return _ops.tensor(values, dtype=dtype or _dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def asarray(obj: Any, *, dtype=None, device=None, copy=None, requires_grad: bool = False):
    """`obj` as a tensor: the tensor itself (or a numpy array's memory) where dtype and
    device allow and ``copy`` is not True; a copy where ``copy=True``."""
    if isinstance(obj, Tensor):
        out = obj.to(device=device or obj.device, dtype=dtype or obj.dtype)
        if copy and out is obj:
            out = obj.clone()
    elif copy:
        out = _ops.tensor(obj, dtype=dtype, device=device)
    else:
        out = _ops.as_tensor(obj, dtype=dtype, device=device)
    if copy is False and isinstance(obj, (Tensor, np.ndarray)) and out.data_ptr() != _address(obj):
        raise ValueError("asarray: copy=False, but a copy is needed for the dtype or device asked for")
    return out.requires_grad_() if requires_grad else out


def _address(obj) -> int:
    return obj.data_ptr() if isinstance(obj, Tensor) else obj.__array_interface__["data"][0]


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0, requires_grad: bool = False):
    """A 1-D tensor over `buffer`'s memory (an object of the buffer protocol), `count` items
    of `dtype` from byte `offset` (all of the rest with -1)."""
    arr = np.frombuffer(buffer, dtype=_dt.as_dtype(dtype).np, count=count, offset=offset)
    if not arr.flags.writeable:
        warnings.warn("The given buffer is not writable, and PyTorch does not support non-writable tensors. "
                      "This means you can write to the underlying (supposedly non-writable) buffer using the "
                      "tensor.", UserWarning, stacklevel=2)
        arr = arr.copy()
    out = _ops.as_tensor(arr)
    return out.requires_grad_() if requires_grad else out


def adjoint(input):
    return input.adjoint()


def embedding(weight, indices, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False):
    """``torch.embedding``: the rows of `weight` at `indices`, weight first (the reverse of
    ``nn.functional.embedding``). As in ATen, a negative `padding_idx` means no padding row
    (``nn.functional.embedding`` wraps negative values before it gets here)."""
    if isinstance(weight, Tensor) and isinstance(indices, Tensor) and weight.dtype.is_integer \
            and not indices.dtype.is_integer:
        raise TypeError("embedding: torch.embedding takes (weight, indices); got integer weight and "
                        f"{indices.dtype.name} indices (nn.functional.embedding takes (input, weight))")
    pad = None if padding_idx is None or padding_idx < 0 else int(padding_idx)
    return _ops.embedding(indices, weight, pad, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def split_with_sizes(input, split_sizes, dim: int = 0):
    return input.split_with_sizes(split_sizes, dim)


unsafe_chunk, unsafe_split = _ops.chunk, _ops.split


def constant_pad_nd(input, pad, value: float = 0):
    from .nn.functional import pad as _pad
    return _pad(input, tuple(pad), mode="constant", value=value)


def is_neg(input) -> bool:
    """False: tracejit keeps no lazily negated tensors (as ``Tensor.is_neg``)."""
    return input.is_neg()


def is_inference(input) -> bool:
    return input.is_inference()


def is_storage(obj) -> bool:
    from .storage import UntypedStorage
    return isinstance(obj, UntypedStorage)


def is_autocast_enabled(device_type=None) -> bool:
    """``torch.is_autocast_enabled()`` asks about CUDA autocast (never on here); with a
    device type, about that device's."""
    from .amp import is_autocast_enabled as _on
    return False if device_type is None else _on(device_type)


def get_device_module(device=None):
    """``torch.get_device_module``: ``tracejit.cuda`` or ``tracejit.cpu`` for a device (a
    name or a device; None: the accelerator's, else the CPU's)."""
    import importlib
    from .device import device as _device
    if device is None:
        from .accelerator import current_accelerator
        kind = (current_accelerator() or _device("cpu")).type
    elif isinstance(device, (str, _device)):
        kind = _device(device).type
    else:
        raise RuntimeError(f"Invalid value of device '{device}', expect torch.device, str, or None")
    try:
        return importlib.import_module(f"{__package__}.{kind}")
    except ModuleNotFoundError:
        raise RuntimeError(f"Device '{kind}' does not have a corresponding module registered as "
                           f"'torch.{kind}'.") from None


def is_autocast_cpu_enabled() -> bool:
    return is_autocast_enabled("cpu")


def get_autocast_dtype(device_type: str):
    from .amp import get_autocast_dtype as _dtype
    return _dtype(device_type) if device_type == "cpu" else _dt.float16


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype():
    return _dt.float16


class _SymMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return cls.of_sym and isinstance(obj, Sym)


class SymInt(metaclass=_SymMeta):
    """A symbolic size: inside a compiled function, a dynamic dim of a tensor's shape."""
    of_sym = True


class SymFloat(metaclass=_SymMeta):
    of_sym = False


class SymBool(metaclass=_SymMeta):
    of_sym = False


def sym_int(a):
    return a if isinstance(a, Sym) else math.trunc(a)


def sym_ite(b, t, f):
    return t if b else f


# (on the plain numbers and sizes here, Python's own functions)
sym_float, sym_max, sym_min, sym_sqrt, sym_sum = float, max, min, math.sqrt, sum
sym_not = operator.not_
