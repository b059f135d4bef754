"""``tracejit.save`` / ``tracejit.load``: a file format that never runs code on load.

Layout (all integers little-endian)::

    b"TRACEJIT"          8 bytes  magic
    version              u32      FORMAT_VERSION
    header length        u64
    data length          u64
    header               JSON (utf-8): {"root": <node>, "tensors": [record, ...]}
    zero padding         up to a multiple of 64 bytes from the start of the file
    data                 raw little-endian tensor bytes, each tensor 64-byte aligned
    sha256               32 bytes over everything before it

A node is a JSON scalar (None, bool, int, float, str) or a tagged object:
``{"tensor": i}`` (or ``"ndarray"``), ``{"list": [...]}``, ``{"tuple": [...]}``,
``{"dict": [[key, value], ...]}`` (``"odict"`` for OrderedDict; keys are nodes, so
int keys survive), ``{"dtype": name}``, ``{"device": str}``. A tensor record gives
dtype, shape, offset and nbytes into the data section, and flags (requires_grad,
parameter). Loading parses JSON and copies bytes into arrays of whitelisted dtypes;
nothing is imported or called by name, unlike pickle. A short, damaged or foreign
file fails the length, magic or checksum test with a `SerializationError`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import tempfile
from collections import OrderedDict

import numpy as np

from . import dtypes as _dt
from .device import CPU, CudaUnavailableError, as_device, device as _device_cls
from .errors import SerializationError
from .tensor import Tensor

__all__ = ["save", "load", "FORMAT_VERSION", "add_safe_globals", "safe_globals", "get_safe_globals",
           "clear_safe_globals"]

MAGIC = b"TRACEJIT"
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sIQQ")
_DIGEST = 32
_ALIGN = 64
_MAX_DEPTH = 200
_MAX_DIMS = 64  # numpy's limit


# ---------------------------------------------------------------- writing
class _Writer:
    def __init__(self):
        self.records: list[dict] = []
        self.arrays: list[np.ndarray] = []
        self.memo: dict[int, int] = {}  # id(tensor) -> record index: shared tensors are stored once
        self.keep: list = []            # keep memoised objects alive so ids stay unique
        self.offset = 0

    def add_array(self, obj, arr: np.ndarray, extra: dict) -> int:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not _little()):
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        dt = _dt.as_dtype(arr.dtype)  # raises TypeError for dtypes outside tracejit's set
        self.offset = _round_up(self.offset, _ALIGN)
        rec = {"dtype": dt.name, "shape": list(arr.shape), "offset": self.offset, "nbytes": int(arr.nbytes)}
        rec.update(extra)
        self.offset += arr.nbytes
        self.records.append(rec)
        self.arrays.append(arr)
        self.memo[key] = len(self.records) - 1
        self.keep.append(obj)
        return self.memo[key]

    def node(self, obj, path: str, depth: int = 0):
        if depth > _MAX_DEPTH:
            raise ValueError(f"save: object nested deeper than {_MAX_DEPTH} levels at {path}")
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, (int, np.integer)):
            return int(obj)
        if isinstance(obj, (float, np.floating)):
            return float(obj)
        if isinstance(obj, Tensor):
            from .nn.parameter import Parameter
            extra = {"requires_grad": bool(obj.requires_grad), "device": str(obj.device)}
            if isinstance(obj, Parameter):
                extra["parameter"] = True
            return {"tensor": self.add_array(obj, obj.detach()._host(), extra)}
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise TypeError(f"save: numpy arrays of dtype object can't be saved (at {path})")
            return {"ndarray": self.add_array(obj, obj, {})}
        if isinstance(obj, _dt.DType):
            return {"dtype": obj.name}
        if isinstance(obj, _device_cls):
            return {"device": str(obj)}
        if isinstance(obj, list):
            return {"list": [self.node(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]}
        if isinstance(obj, tuple):
            return {"tuple": [self.node(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if not (k is None or isinstance(k, (bool, int, float, str, tuple, np.integer))):
                    raise TypeError(f"save: dict key {k!r} of type {type(k).__name__} at {path} can't be "
                                    f"saved (keys must be str, int, float, bool, None or tuples of them)")
                items.append([self.node(k, f"{path} key", depth + 1),
                              self.node(v, f"{path}[{k!r}]", depth + 1)])
            return {"odict" if isinstance(obj, OrderedDict) else "dict": items}
        raise TypeError(f"save: can't save an object of type {type(obj).__name__} at {path}; supported "
                        f"are Tensors, numpy arrays, dtypes, devices, None, bool, int, float, str and "
                        f"lists, tuples and dicts of them")


def _little() -> bool:
    import sys
    return sys.byteorder == "little"


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def _encode(obj) -> bytearray:
    w = _Writer()
    root = w.node(obj, "obj")
    header = json.dumps({"root": root, "tensors": w.records}, separators=(",", ":"),
                        allow_nan=True).encode("utf-8")
    start = _round_up(_PREAMBLE.size + len(header), _ALIGN)
    buf = bytearray(start + w.offset)
    _PREAMBLE.pack_into(buf, 0, MAGIC, FORMAT_VERSION, len(header), w.offset)
    buf[_PREAMBLE.size:_PREAMBLE.size + len(header)] = header
    for rec, arr in zip(w.records, w.arrays):
        o = start + rec["offset"]
        buf[o:o + rec["nbytes"]] = arr.reshape(-1).view(np.uint8).tobytes() if arr.size else b""
    buf += hashlib.sha256(buf).digest()
    return buf


def save(obj, f) -> None:
    """Write `obj` to a path or binary file.

    Tensors, state_dicts and nested dicts/lists/tuples of tensors and plain values are
    written in tracejit's format, which loading never runs code for. Anything else (a whole
    ``nn.Module``, a custom class) is pickled, as PyTorch does (serialization_pickle.py);
    `load` then refuses it unless ``weights_only=False``. Writing to a path goes through a
    temporary file renamed into place, so a crash never leaves a half-written checkpoint
    under the final name.
    """
    try:
        data = _encode(obj)
    except TypeError as native:   # not representable in tracejit's format: pickled
        from .serialization_pickle import dumps
        try:
            data = dumps(obj)
        except Exception as e:  # noqa: BLE001  (pickle raises several types)
            raise TypeError(f"{native}; nor can it be pickled ({type(e).__name__}: {e})") from None
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".tracejit-", dir=d)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    elif hasattr(f, "write"):
        f.write(data)
    else:
        raise TypeError(f"save: expected a path or a binary file object, got {type(f).__name__}")


# ---------------------------------------------------------------- reading
def _read_all(f, where: str) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read()
    if isinstance(f, (bytes, bytearray, memoryview)):
        return bytes(f)
    if hasattr(f, "read"):
        data = f.read()
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"load: {where} must be opened in binary mode ('rb')")
        return bytes(data)
    raise TypeError(f"load: expected a path, bytes or a binary file object, got {type(f).__name__}")


def _bad(where: str, msg: str) -> SerializationError:
    return SerializationError(f"load: {where}: {msg}")


def _map_device(map_location, recorded: str):
    if map_location is None:
        return as_device(recorded)
    if isinstance(map_location, dict):
        return as_device(map_location.get(recorded, recorded))
    return as_device(map_location)


def load(f, map_location=None, *, weights_only: bool = True):
    """Read what `save` wrote. Raises `SerializationError` for truncated, foreign or corrupt files.

    ``map_location`` is a device (``"cpu"``), or a dict mapping saved device strings to
    new ones. Files in tracejit's format load the same whatever ``weights_only`` says:
    reading them never runs code. A pickled file (a whole module saved) loads with
    ``weights_only=True`` (the default, as in PyTorch 2.6+) only if it holds nothing but
    tensors, plain containers and the globals allowed with
    ``tracejit.serialization.add_safe_globals``; otherwise it raises PyTorch's "Weights
    only load failed" error. ``weights_only=False`` unpickles anything: it runs the code the
    file names, so use it only for files you trust.
    """
    if callable(map_location) and not isinstance(map_location, _device_cls):
        raise TypeError("load: a callable map_location is not supported; pass a device, a string or a dict")
    if map_location is not None and not isinstance(map_location, dict):
        as_device(map_location)  # a bad device name fails here, before any reading
    where = repr(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "the given file"
    data = _read_all(f, where)
    from . import serialization_pickle as _pkl
    if _pkl.is_pickled(data):
        return _pkl.loads(data, weights_only=bool(weights_only), map_location=map_location)
    if len(data) < len(MAGIC) and MAGIC.startswith(data):
        raise _bad(where, f"file is truncated ({len(data)} bytes)" if data else "file is empty")
    if data[:len(MAGIC)] != MAGIC:
        raise _bad(where, "not a tracejit file (wrong magic bytes; was it written by tracejit.save?)")
    if len(data) < _PREAMBLE.size + _DIGEST:
        raise _bad(where, f"file is truncated ({len(data)} bytes)")
    _, version, hlen, dlen = _PREAMBLE.unpack_from(data, 0)
    if version > FORMAT_VERSION or version < 1:
        raise _bad(where, f"format version {version} is not supported (this tracejit reads version "
                          f"{FORMAT_VERSION}); was it written by a newer tracejit?")
    start = _round_up(_PREAMBLE.size + hlen, _ALIGN)
    expected = start + dlen + _DIGEST
    if len(data) < expected:
        raise _bad(where, f"file is truncated: {len(data)} bytes, expected {expected}")
    if len(data) > expected:
        raise _bad(where, f"file has {len(data) - expected} unexpected trailing bytes (corrupted?)")
    body, digest = memoryview(data)[:-_DIGEST], data[-_DIGEST:]  # (a view: no copy of the data)
    if hashlib.sha256(body).digest() != digest:
        raise _bad(where, "checksum mismatch: the file is truncated or corrupted")
    try:
        header = json.loads(bytes(body[_PREAMBLE.size:_PREAMBLE.size + hlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _bad(where, f"unreadable header ({e})") from None
    except RecursionError:
        raise _bad(where, "header nested too deeply") from None
    return _Reader(body, start, header, map_location, where).run()


class _Reader:
    def __init__(self, body: memoryview, start: int, header, map_location, where: str):
        self.body, self.start, self.header = body, start, header
        self.map_location, self.where = map_location, where
        self.cache: dict = {}

    def fail(self, msg: str):
        return _bad(self.where, msg)

    def run(self):
        h = self.header
        if not isinstance(h, dict) or "root" not in h or not isinstance(h.get("tensors"), list):
            raise self.fail("malformed header (missing 'root' or 'tensors')")
        self.check_records(h["tensors"])
        return self.node(h["root"], 0)

    def check_records(self, recs) -> None:
        """Every record is well-formed and the records' bytes are disjoint ranges of the
        data section, as `save` writes them: what loading allocates is then bounded by the
        file's size (records sharing bytes would each be copied: a 4 MiB file could ask for
        gigabytes)."""
        spans = []
        for i, rec in enumerate(recs):
            self.array_layout(rec, i)
            if rec["nbytes"]:
                spans.append((rec["offset"], rec["offset"] + rec["nbytes"], i))
        spans.sort()
        for (_, end, i), (lo, _, j) in zip(spans, spans[1:]):
            if lo < end:
                raise self.fail(f"tensor records {i} and {j} overlap in the data section (a file "
                                f"written by tracejit.save stores each tensor's bytes once)")

    def node(self, n, depth: int):
        if depth > _MAX_DEPTH + 2:
            raise self.fail("header nested too deeply")
        if n is None or isinstance(n, (bool, int, float, str)):
            return n
        if isinstance(n, dict) and len(n) == 1:
            (tag, v), = n.items()
            if tag in ("tensor", "ndarray"):
                return self.tensor(v, tag == "ndarray")
            if tag == "list" and isinstance(v, list):
                return [self.node(x, depth + 1) for x in v]
            if tag == "tuple" and isinstance(v, list):
                return tuple(self.node(x, depth + 1) for x in v)
            if tag in ("dict", "odict") and isinstance(v, list):
                out = OrderedDict() if tag == "odict" else {}
                for item in v:
                    if not (isinstance(item, list) and len(item) == 2):
                        raise self.fail("malformed dict entry in header")
                    key = self.node(item[0], depth + 1)
                    value = self.node(item[1], depth + 1)
                    try:
                        out[key] = value
                    except TypeError:
                        raise self.fail(f"unhashable dict key {key!r} in header") from None
                return out
            if tag == "dtype" and isinstance(v, str):
                try:
                    return _dt.as_dtype(v)
                except TypeError:
                    raise self.fail(f"unknown dtype {v!r}") from None
            if tag == "device" and isinstance(v, str):
                try:
                    return as_device(v)
                except (TypeError, ValueError):
                    raise self.fail(f"unknown device {v!r}") from None
        raise self.fail(f"unknown node in header: {str(n)[:80]}")

    def tensor(self, i, as_ndarray: bool):
        recs = self.header["tensors"]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(recs):
            raise self.fail(f"tensor index {i!r} out of range")
        key = (i, as_ndarray)
        if key in self.cache:
            return self.cache[key]
        rec = recs[i]
        arr = self.array(rec, i)
        if as_ndarray:
            out = arr
        else:
            dt = _dt.as_dtype(arr.dtype)
            recorded = str(rec.get("device", "cpu"))
            try:
                dev = _map_device(self.map_location, recorded)
            except (TypeError, ValueError) as e:
                raise self.fail(f"tensor {i} has an unusable device {recorded!r} ({e})") from None
            t = Tensor._wrap(arr, dt, CPU)
            if dev is not CPU:
                try:
                    t = t.to(dev)
                except CudaUnavailableError as e:
                    raise CudaUnavailableError(f"load: tensor {i} was saved on {recorded}, which is not "
                                               f"available here ({e}); pass map_location='cpu'") from None
            if rec.get("parameter"):
                from .nn.parameter import Parameter
                out = Parameter(t, requires_grad=bool(rec.get("requires_grad", True)))
            else:
                out = t
                if rec.get("requires_grad") and dt.is_floating_point:
                    out.requires_grad = True
        self.cache[key] = out
        return out

    def array(self, rec, i) -> np.ndarray:
        dt, shape, count, lo = self.array_layout(rec, i)
        arr = np.frombuffer(self.body, dtype=dt.np.newbyteorder("<"), count=count, offset=lo)
        return arr.astype(dt.np).reshape(tuple(shape))  # a private, writable, native-order copy

    def array_layout(self, rec, i):
        """(dtype, shape, element count, start in the file) of a valid tensor record."""
        if not isinstance(rec, dict):
            raise self.fail(f"tensor record {i} is malformed")
        name, shape, offset, nbytes = rec.get("dtype"), rec.get("shape"), rec.get("offset"), rec.get("nbytes")
        try:
            dt = _dt.as_dtype(name) if isinstance(name, str) else None
        except TypeError:
            dt = None
        if dt is None:
            raise self.fail(f"tensor {i} has unknown dtype {name!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape)):
            raise self.fail(f"tensor {i} has a malformed shape {shape!r}")
        if len(shape) > _MAX_DIMS:
            raise self.fail(f"tensor {i} has {len(shape)} dims (at most {_MAX_DIMS} are supported)")
        if math.prod(max(d, 1) for d in shape) * dt.itemsize >= 2 ** 62:
            raise self.fail(f"tensor {i} has an impossible shape {shape!r} (too many elements)")
        count = math.prod(shape)
        if not (isinstance(offset, int) and isinstance(nbytes, int) and offset >= 0
                and nbytes == count * dt.itemsize):
            raise self.fail(f"tensor {i} has inconsistent offset/size ({offset}, {nbytes})")
        lo = self.start + offset
        if lo + nbytes > len(self.body):
            raise self.fail(f"tensor {i} lies past the end of the data (file truncated?)")
        return dt, shape, count, lo


from .serialization_pickle import (add_safe_globals, clear_safe_globals, get_safe_globals,  # noqa: E402,F401
                                   safe_globals)
