"""Pickled checkpoints: what ``tracejit.save`` writes for objects its own format cannot
hold (a whole ``nn.Module``, a custom class), and how ``tracejit.load`` reads them.

Tensors, state_dicts and plain containers keep tracejit's format (serialization.py), which
never runs code on load. Anything else is pickled, as PyTorch does: the file starts with
`MAGIC` and holds one pickle stream in which every tensor is a call of `_rebuild_tensor`
on its bytes. Loading follows PyTorch 2.6+: with ``weights_only=True`` (the default) a
restricted unpickler accepts only tensors, dtypes, devices, plain containers and the
globals added with `add_safe_globals` / `safe_globals`, and refuses anything else --
a pickled module's class -- with PyTorch's "Weights only load failed" error;
``weights_only=False`` unpickles everything, which runs whatever code the file names:
use it only for files you trust.
"""
from __future__ import annotations

import contextlib
import io
import pickle
import threading

import numpy as np

__all__ = ["MAGIC", "dumps", "is_pickled", "loads", "add_safe_globals", "safe_globals",
           "get_safe_globals", "clear_safe_globals"]

MAGIC = b"TRACEJIT-PICKLE\n"
_SAFE: list = []
_LOADING = threading.local()       # map_location of the load in progress


def add_safe_globals(safe_globals) -> None:
    """Allow these classes/functions in ``load(..., weights_only=True)``."""
    _SAFE.extend(safe_globals)


def get_safe_globals() -> list:
    return list(_SAFE)


def clear_safe_globals() -> None:
    _SAFE.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """Allow these globals for the loads inside the block."""
    n = len(_SAFE)
    _SAFE.extend(safe_globals)
    try:
        yield
    finally:
        del _SAFE[n:]


# ---------------------------------------------------------------- writing
def _rebuild_tensor(raw: bytes, shape: tuple, dtype: str, device: str, requires_grad: bool,
                    parameter: bool):
    from . import dtypes as _dt
    from .device import as_device
    from .tensor import Tensor
    dt = _dt.as_dtype(dtype)
    arr = np.frombuffer(raw, dtype=dt.np.newbyteorder("<")).astype(dt.np).reshape(shape)
    from .serialization import _map_device
    dev = _map_device(getattr(_LOADING, "map_location", None), device)
    t = Tensor._wrap(arr.copy(), dt, as_device("cpu"))
    if dev.type != "cpu":
        t = t.to(dev)
    if parameter:
        from .nn.parameter import Parameter
        return Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_()
    return t


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        from .tensor import Tensor
        if isinstance(obj, Tensor):
            from .nn.parameter import Parameter
            arr = np.ascontiguousarray(obj.detach()._host())
            return (_rebuild_tensor, (arr.astype(arr.dtype.newbyteorder("<")).tobytes(), tuple(arr.shape),
                                      obj.dtype.name, str(obj.device), bool(obj.requires_grad),
                                      isinstance(obj, Parameter)))
        return NotImplemented


def dumps(obj) -> bytes:
    buf = io.BytesIO()
    buf.write(MAGIC)
    _Pickler(buf, protocol=4).dump(obj)
    return buf.getvalue()


# ---------------------------------------------------------------- reading
def is_pickled(data: bytes) -> bool:
    return data[:len(MAGIC)] == MAGIC


_ALLOWED = {("tracejit.serialization_pickle", "_rebuild_tensor"), ("tracejit.dtypes", "as_dtype"),
            ("tracejit.device", "device"), ("collections", "OrderedDict"), ("builtins", "set"),
            ("builtins", "frozenset"), ("builtins", "complex"), ("builtins", "slice"),
            ("builtins", "range"), ("builtins", "bytearray")}


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        for g in _SAFE:
            if getattr(g, "__module__", None) == module and getattr(g, "__qualname__", None) == name:
                return g
        raise pickle.UnpicklingError(_refusal(f"{module}.{name}"))


def _refusal(qualname: str) -> str:
    return (
        "Weights only load failed. This file can still be loaded, to do so you have two options, "
        "do those steps only if you trust the source of the checkpoint. \n\t(1) `tracejit.load` "
        "loads with `weights_only=True` by default, as PyTorch 2.6 and later do. Re-running "
        "`tracejit.load` with `weights_only` set to `False` will likely succeed, but it can result "
        "in arbitrary code execution. Do it only if you got the file from a trusted source.\n\t(2) "
        "Alternatively, to load with `weights_only=True` please check the recommended steps in the "
        f"following error message.\n\tWeightsUnpickler error: Unsupported global: GLOBAL {qualname} "
        f"was not an allowed global by default. Please use "
        f"`tracejit.serialization.add_safe_globals([{qualname}])` or the "
        f"`tracejit.serialization.safe_globals([{qualname}])` context manager to allowlist this "
        f"global if you trust this class/function.")


def loads(data: bytes, weights_only: bool, map_location=None):
    stream = io.BytesIO(memoryview(data)[len(MAGIC):])
    _LOADING.map_location = map_location
    try:
        if weights_only:
            return _WeightsUnpickler(stream).load()
        return pickle.Unpickler(stream).load()
    finally:
        _LOADING.map_location = None
