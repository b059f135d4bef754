"""Reading files written by ``torch.save``: PyTorch's zip archive of one pickle (data.pkl)
and one file of raw bytes per storage (data/<key>).

A restricted unpickler rebuilds tensors, parameters, plain containers, ``OrderedDict``,
dtypes, devices and sizes, and refuses every other global with a `SerializationError` that
carries PyTorch's "Weights only load failed" text: nothing the file names is imported or
run, whatever ``weights_only`` says (a pickled module's class would need PyTorch itself). Each storage is read once and every
tensor on it is its strided view, copied into a tensor of its own.
"""
from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict

import numpy as np

from . import dtypes as _dt
from .device import as_device
from .errors import SerializationError

__all__ = ["load_torch_zip"]

_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
             "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
             "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
             "ComplexDoubleStorage": "complex128"}
_DTYPES = set(_STORAGES.values())


class _Storage:
    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype):
        self.array, self.dtype = array, dtype


def _rebuild_tensor(storage: _Storage, offset: int, size, stride, requires_grad=False, *_):
    from .tensor import Tensor
    base = storage.array
    size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else offset - 1
    if offset < 0 or last >= base.size or min(stride, default=0) < 0:
        raise SerializationError(f"load: a tensor of size {size} and stride {stride} at offset {offset} "
                                 f"lies outside its storage of {base.size} elements")
    view = np.lib.stride_tricks.as_strided(base[offset:], size, tuple(s * base.itemsize for s in stride))
    t = Tensor._wrap(np.array(view, order="C"), storage.dtype, as_device("cpu"))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad, *_):
    from .nn.parameter import Parameter
    return Parameter(data, requires_grad=requires_grad)


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream, archive: zipfile.ZipFile, prefix: str):
        super().__init__(stream)
        self.archive, self.prefix, self.storages = archive, prefix, {}

    def find_class(self, module: str, name: str):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return _rebuild_parameter
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name in _STORAGES:
            return _dt.as_dtype(_STORAGES[name])
        if module == "torch" and name in _DTYPES:
            return _dt.as_dtype(name)
        if module == "torch" and name == "device":
            return as_device
        if module == "torch" and name == "Size":
            from .size import Size
            return Size
        from .serialization_pickle import _refusal
        raise pickle.UnpicklingError(_refusal(f"{module}.{name}"))

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"load: unknown persistent id {pid!r} in a torch.save file")
        _, dtype, key, _location, numel = pid
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}/data/{key}")
            host = np.uint16 if dtype is _dt.bfloat16 else dtype.np
            arr = np.frombuffer(raw, dtype=np.dtype(host).newbyteorder("<"))
            if arr.size < numel:
                raise SerializationError(f"load: storage {key} holds {arr.size} elements, the file "
                                         f"says {numel}")
            self.storages[key] = _Storage(arr.astype(host), dtype)
        return self.storages[key]


def load_torch_zip(data: bytes, map_location=None, where: str = "the given file"):
    """The object a ``torch.save`` file holds, its tensors moved by `map_location`."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        pkl = next(n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1)
    except (zipfile.BadZipFile, StopIteration):
        raise SerializationError(f"load: {where} is a zip file but not one torch.save wrote") from None
    prefix = pkl.rsplit("/", 1)[0]
    big = [i.filename for i in archive.infolist() if i.file_size > len(data)]
    if big:   # (torch.save stores entries uncompressed: larger than the file is a bomb or damage)
        raise SerializationError(f"load: {where}: entry {big[0]} would unpack to more bytes than the file has")
    if archive.namelist().count(f"{prefix}/byteorder") and archive.read(f"{prefix}/byteorder") != b"little":
        raise SerializationError(f"load: {where} was written on a big-endian machine")
    try:
        obj = _Unpickler(io.BytesIO(archive.read(pkl)), archive, prefix).load()
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:   # (a refused global too)
        raise SerializationError(f"load: {where}: {e}") from None
    if map_location is None:
        return obj
    from .serialization import _map_device
    dev = _map_device(map_location, "cpu")
    return obj if dev.type == "cpu" else _moved(obj, dev)


def _moved(obj, dev):
    from .tensor import Tensor
    if isinstance(obj, Tensor):
        return obj.to(dev)
    if isinstance(obj, dict):
        return type(obj)((k, _moved(v, dev)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_moved(v, dev) for v in obj)
    return obj
