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
int keys survive), ``{"dtype": name}``, ``{"device": str}``, and (version 2) ``{"view":
[...]}`` for tensors sharing memory (serialization_views.py). A tensor record gives
dtype, shape, offset and nbytes into the data section, and flags (requires_grad,
parameter). Loading parses JSON and copies bytes into arrays of whitelisted dtypes;
nothing is imported or called by name, unlike pickle. A short, damaged or foreign
file fails the length, magic or checksum test with a `SerializationError` (a header that
does not parse or does not fit the file is checked against the checksum first, so
corruption is named as such).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import struct
import sys
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
FORMAT_VERSION = 2   # 2: view records (serialization_views.py); files without them are written as 1
_PREAMBLE = struct.Struct("<8sIQQ")
_DIGEST = 32
_ALIGN = 64
_MAX_DEPTH = 200
_MAX_DIMS = 64  # numpy's limit


# ---------------------------------------------------------------- writing
class _Writer:
    def __init__(self, groups=None):
        self.groups = groups            # StorageGroups: tensors saved as views of one storage
        self.views: dict[int, int] = {}   # id(tensor) -> its view number
        self.records: list[dict] = []
        self.arrays: list[np.ndarray] = []
        self.memo: dict[int, int] = {}  # id(tensor) -> record index: shared tensors are stored once
        self.keep: list = []            # keep memoised objects alive so ids stay unique
        self.offset = 0

    def add_array(self, obj, arr: np.ndarray, extra: dict, dtype=None) -> int:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder != "little"):
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        dt = dtype or _dt.as_dtype(arr.dtype)  # raises TypeError for dtypes outside tracejit's set
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
            place = self.groups.member.get(id(obj)) if self.groups is not None else None
            if place is not None:
                storage, offset, strides = place
                i = self.add_array(storage, storage, {"device": "cpu"}, obj.dtype)
                k = self.views.setdefault(id(obj), len(self.views))   # the same tensor loads as one
                return {"view": [i, offset, list(obj.shape), list(strides), extra["requires_grad"],
                                 "parameter" in extra, k]}
            return {"tensor": self.add_array(obj, obj.detach()._host(), extra, obj.dtype)}
        if isinstance(obj, np.ndarray):
            if obj.dtype == object:
                raise TypeError(f"save: numpy arrays of dtype object can't be saved (at {path})")
            return {"ndarray": self.add_array(obj, obj, {})}
        if isinstance(obj, _dt.DType):
            return {"dtype": obj.name}
        if isinstance(obj, _device_cls):
            return {"device": str(obj)}
        if isinstance(obj, (list, tuple)):
            return {"list" if isinstance(obj, list) else "tuple":
                    [self.node(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(obj)]}
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


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


def _encode(obj) -> bytearray:
    from .serialization_views import StorageGroups
    w = _Writer(StorageGroups(obj))
    root = w.node(obj, "obj")
    header = json.dumps({"root": root, "tensors": w.records}, separators=(",", ":"),
                        allow_nan=True).encode("utf-8")
    start = _round_up(_PREAMBLE.size + len(header), _ALIGN)
    buf = bytearray(start + w.offset)
    _PREAMBLE.pack_into(buf, 0, MAGIC, FORMAT_VERSION if w.views else 1, len(header), w.offset)
    buf[_PREAMBLE.size:_PREAMBLE.size + len(header)] = header
    for rec, arr in zip(w.records, w.arrays):
        o = start + rec["offset"]
        buf[o:o + rec["nbytes"]] = arr.reshape(-1).view(np.uint8).tobytes() if arr.size else b""
    buf += hashlib.sha256(buf).digest()
    return buf


def save(obj, f, pickle_module=None, pickle_protocol: int = 2, _use_new_zipfile_serialization: bool = True,
         _disable_byteorder_record: bool = False) -> None:
    """Write `obj` to a path or binary file (PyTorch's other arguments, which choose among
    its own formats, are accepted and change nothing here).

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
# Loading streams the file: the header is parsed into compact tuples (`_compactor`), each
# tensor's bytes go straight into its own array, and the sha256 is taken as they go by. So
# what load holds beyond the object it returns is the parsed header, never the file: about
# 1.9x the file for 50,000 tensors of 4 floats (a header entry per 16 bytes of data), a few
# KB for large tensors.
_CHUNK = 1 << 20


def _source(f, where: str):
    """(binary file object, bytes to read from its position, whether load opened it)."""
    if isinstance(f, (str, os.PathLike)):
        fh = open(f, "rb")
        return fh, os.fstat(fh.fileno()).st_size, True
    if isinstance(f, (bytes, bytearray, memoryview)):
        return io.BytesIO(f), memoryview(f).nbytes, False
    if hasattr(f, "read"):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if f.seekable():
                pos = f.tell()
                end = f.seek(0, os.SEEK_END)
                f.seek(pos)
                return f, end - pos, False
        data = f.read()              # not seekable: take it all
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"load: {where} must be opened in binary mode ('rb')")
        return io.BytesIO(data), len(data), False
    raise TypeError(f"load: expected a path, bytes or a binary file object, got {type(f).__name__}")


class _Stream:
    """The file's bytes in order, hashed as they are read."""

    def __init__(self, fh, where: str):
        self.fh, self.where, self.sha = fh, where, hashlib.sha256()

    def read(self, n: int, hash: bool = True) -> bytes:
        parts, got = [], 0
        while got < n:     # by chunks: a length the file does not hold allocates no more than it has
            b = self.fh.read(min(n - got, _CHUNK))
            if not isinstance(b, (bytes, bytearray)):
                raise TypeError(f"load: {self.where} must be opened in binary mode ('rb')")
            if not b:
                raise _bad(self.where, "file is truncated (it changed while being read?)")
            parts.append(b)
            got += len(b)
        data = b"".join(parts)
        if hash:
            self.sha.update(data)
        return data

    def skip(self, n: int) -> None:
        while n > 0:
            n -= len(self.read(min(n, _CHUNK)))

    def into(self, arr: np.ndarray) -> None:
        view = memoryview(arr.reshape(-1).view(np.uint8))
        readinto = getattr(self.fh, "readinto", None)
        pos = 0
        while pos < len(view):
            if readinto is not None:
                k = readinto(view[pos:])
            else:
                b = self.fh.read(len(view) - pos)
                k = len(b)
                view[pos:pos + k] = b
            if not k:
                raise _bad(self.where, "file is truncated (it changed while being read?)")
            pos += k
        self.sha.update(view)


class _Tag(tuple):
    """A one-key header object ``{tag: value}`` (a node) as (tag, value)."""
    __slots__ = ()


class _Record(tuple):
    """A tensor record's fields, in `_FIELDS` order (None where absent)."""
    __slots__ = ()


_FIELDS = ("dtype", "shape", "offset", "nbytes", "requires_grad", "parameter", "device")


def _compactor():
    """json's object_hook for one header: each object as it is parsed becomes a `_Tag` (one
    key), a `_Record` (a tensor record; its dtype and device names shared between records)
    or stays a dict (the header itself, or malformed). A dict per record cost ~0.6 KB; the
    tuples a third of that."""
    names: dict = {}

    def compact(d: dict):
        if len(d) == 1:
            return _Tag(next(iter(d.items())))
        if not d or "root" in d:
            return d
        return _Record(tuple(v) if type(v) is list else names.setdefault(v, v) if type(v) is str else v
                       for v in map(d.get, _FIELDS))
    return compact


def _bad(where: str, msg: str) -> SerializationError:
    return SerializationError(f"load: {where}: {msg}")


def _map_device(map_location, recorded: str):
    if map_location is None:
        return as_device(recorded)
    if isinstance(map_location, dict):
        return as_device(map_location.get(recorded, recorded))
    if callable(map_location) and not isinstance(map_location, _device_cls):
        # PyTorch's fn(storage, location): the storage arrives on the CPU; what it returns
        # (itself, ``storage.cuda(i)``; None: the recorded device) says where it goes.
        got = map_location(_StorageStandIn(CPU), recorded)
        return as_device(recorded) if got is None else as_device(getattr(got, "device", got))
    return as_device(map_location)


class _StorageStandIn:
    """What a callable ``map_location`` receives for a stored tensor: it answers where the
    tensor goes, not its memory."""

    def __init__(self, device):
        self.device = device

    def cpu(self) -> "_StorageStandIn":
        return _StorageStandIn(CPU)

    def cuda(self, device=None, non_blocking: bool = False) -> "_StorageStandIn":
        return _StorageStandIn(as_device("cuda" if device is None else device))

    def to(self, *, device, non_blocking: bool = False) -> "_StorageStandIn":
        return _StorageStandIn(as_device(device))


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, **pickle_load_args):
    """Read what `save` wrote. Raises `SerializationError` for truncated, foreign or corrupt files.
    (``weights_only=None`` is the default, True; ``mmap`` and PyTorch's unpickler arguments
    are accepted: the file is read into memory.)

    ``map_location`` is a device (``"cpu"``), a dict mapping saved device strings to new
    ones, or PyTorch's ``fn(storage, location)`` (``lambda s, loc: s`` keeps tensors on the
    CPU, ``s.cuda(i)`` moves them to GPU i). Files in tracejit's format load the same whatever ``weights_only`` says:
    reading them never runs code. A pickled file (a whole module saved) loads with
    ``weights_only=True`` (the default, as in PyTorch 2.6+) only if it holds nothing but
    tensors, plain containers and the globals allowed with
    ``tracejit.serialization.add_safe_globals``; otherwise it raises PyTorch's "Weights
    only load failed" error. ``weights_only=False`` unpickles anything: it runs the code the
    file names, so use it only for files you trust.
    """
    if map_location is not None and not isinstance(map_location, dict) and not callable(map_location):
        as_device(map_location)  # a bad device name fails here, before any reading
    where = repr(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "the given file"
    fh, size, opened = _source(f, where)
    try:
        from . import serialization_pickle as _pkl
        pos = fh.tell()
        head = fh.read(len(_pkl.MAGIC))
        fh.seek(pos)
        if _pkl.is_pickled(head):   # a pickled object (a whole module): see the docstring
            return _pkl.loads(fh.read(size), weights_only=weights_only is None or bool(weights_only),
                              map_location=map_location)
        if head[:4] == b"PK\x03\x04":   # torch.save's zip archive (serialization_torch.py)
            from .serialization_torch import load_torch_zip
            return load_torch_zip(fh.read(size), map_location, where)
        return _load(_Stream(fh, where), size, map_location, where)
    finally:
        if opened:
            fh.close()


def _load(src: _Stream, size: int, map_location, where: str):
    head = src.read(min(size, _PREAMBLE.size))
    if size < len(MAGIC) and MAGIC.startswith(head):
        raise _bad(where, f"file is truncated ({size} bytes)" if size else "file is empty")
    if head[:len(MAGIC)] != MAGIC:
        raise _bad(where, "not a tracejit file (wrong magic bytes; was it written by tracejit.save?)")
    if size < _PREAMBLE.size + _DIGEST:
        raise _bad(where, f"file is truncated ({size} bytes)")
    _, version, hlen, dlen = _PREAMBLE.unpack_from(head, 0)
    if version > FORMAT_VERSION or version < 1:
        raise _bad(where, f"format version {version} is not supported (this tracejit reads version "
                          f"{FORMAT_VERSION}); was it written by a newer tracejit?")
    start = _round_up(_PREAMBLE.size + hlen, _ALIGN)
    expected = start + dlen + _DIGEST
    if size < expected:
        raise _bad(where, f"file is truncated: {size} bytes, expected {expected}")
    if size > expected:
        raise _bad(where, f"file has {size - expected} unexpected trailing bytes (corrupted?)")
    try:
        try:
            header = json.loads(src.read(hlen).decode("utf-8"), object_hook=_compactor())
        except (UnicodeDecodeError, ValueError) as e:
            raise _bad(where, f"unreadable header ({e})") from None
        except RecursionError:
            raise _bad(where, "header nested too deeply") from None
        reader = _Reader(start, start + dlen, header, map_location, where)
        reader.check_records()
    except SerializationError:
        # A header that does not parse, or whose records do not fit the file: corruption
        # (which the checksum names) or a file that lies.
        src.skip(expected - _DIGEST - _PREAMBLE.size - hlen)
        if src.sha.digest() != src.read(_DIGEST, hash=False):
            raise _bad(where, "checksum mismatch: the file is truncated or corrupted") from None
        raise
    src.skip(start - _PREAMBLE.size - hlen)
    reader.read_arrays(src)
    if src.sha.digest() != src.read(_DIGEST, hash=False):
        raise _bad(where, "checksum mismatch: the file is truncated or corrupted")
    return reader.run()


class _Reader:
    def __init__(self, start: int, end: int, header, map_location, where: str):
        self.start, self.end, self.header = start, end, header
        self.map_location, self.where = map_location, where
        self.cache: dict = {}
        self.arrays: list = []

    def fail(self, msg: str):
        return _bad(self.where, msg)

    def check_records(self) -> None:
        """Every record is well-formed and the records' bytes are disjoint ranges of the
        data section, as `save` writes them: what loading allocates is then bounded by the
        file's size (records sharing bytes would each be copied: a 4 MiB file could ask for
        gigabytes). Each record becomes its layout (`array_layout`) in place."""
        h = self.header
        if not isinstance(h, dict) or "root" not in h or not isinstance(h.get("tensors"), list):
            raise self.fail("malformed header (missing 'root' or 'tensors')")
        recs = h["tensors"]
        spans = []
        for i, rec in enumerate(recs):
            recs[i] = lay = self.array_layout(rec, i)
            if lay[4]:
                spans.append((lay[3], lay[3] + lay[4], i))
        spans.sort()
        for (_, end, i), (lo, _, j) in zip(spans, spans[1:]):
            if lo < end:
                raise self.fail(f"tensor records {i} and {j} overlap in the data section (a file "
                                f"written by tracejit.save stores each tensor's bytes once)")

    def read_arrays(self, src: _Stream) -> None:
        """Each tensor's bytes from the data section into a private, writable, native-order
        array of its own, in file order; its record keeps only (requires_grad, parameter,
        device) from then on."""
        recs = self.header["tensors"]
        self.arrays = [None] * len(recs)
        self.dtypes = [None] * len(recs)   # (bf16's words are uint16 arrays: the record says)
        pos = self.start
        for i in sorted(range(len(recs)), key=lambda i: recs[i][3]):
            dt, shape, _, lo, nbytes = recs[i][:5]
            src.skip(lo - pos)
            arr = np.empty(shape, dtype=dt.np.newbyteorder("<"))
            src.into(arr)
            self.arrays[i] = arr.astype(dt.np, copy=False)
            self.dtypes[i] = dt
            recs[i] = recs[i][5:]
            pos = max(pos, lo + nbytes)
        src.skip(self.end - pos)

    def run(self):
        return self.node(self.header["root"], 0)

    def node(self, n, depth: int):
        if depth > _MAX_DEPTH + 2:
            raise self.fail("header nested too deeply")
        if n is None or isinstance(n, (bool, int, float, str)):
            return n
        if type(n) is _Tag:
            tag, v = n
            if tag in ("tensor", "ndarray"):
                return self.tensor(v, tag == "ndarray")
            if tag == "view" and isinstance(v, list) and len(v) == 7:
                if not isinstance(v[6], (int, str)) or isinstance(v[6], bool):
                    raise self.fail("malformed view number")
                if ("view", v[6]) not in self.cache:
                    self.cache[("view", v[6])] = self.view(*v[:6])
                return self.cache[("view", v[6])]
            if tag in ("list", "tuple") and isinstance(v, list):
                items = [self.node(x, depth + 1) for x in v]
                return items if tag == "list" else tuple(items)
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
        arr = self.arrays[i]
        requires_grad, parameter, recorded = recs[i]
        if as_ndarray:
            out = arr
        else:
            dt = self.dtypes[i]
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
            out = _flagged(t, requires_grad, parameter)
        self.cache[key] = out
        return out

    def view(self, i, offset, shape, strides, requires_grad, parameter):
        """A tensor over storage record `i`'s array (serialization_views.py)."""
        from .serialization_views import view_array
        storage = self.tensor(i, False)
        if (storage.dim() != 1 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          for v in [offset, *shape, *strides])):
            raise self.fail(f"malformed view of tensor {i}")
        try:
            arr = view_array(storage._data, offset, shape, strides)
        except ValueError as e:
            raise self.fail(f"view of tensor {i}: {e}") from None
        return _flagged(Tensor._wrap(arr, storage.dtype, storage.device), requires_grad, parameter)

    def array_layout(self, rec, i) -> tuple:
        """(dtype, shape, element count, start in the file, nbytes, requires_grad, parameter,
        device) of a valid tensor record."""
        if type(rec) is not _Record:
            raise self.fail(f"tensor record {i} is malformed")
        name, shape, offset, nbytes, requires_grad, parameter, device = rec
        try:
            dt = _dt.as_dtype(name) if isinstance(name, str) else None
        except TypeError:
            dt = None
        if dt is None:
            raise self.fail(f"tensor {i} has unknown dtype {name!r}")
        if not (isinstance(shape, tuple) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                 for d in shape)):
            raise self.fail(f"tensor {i} has a malformed shape {list(shape) if isinstance(shape, tuple) else shape!r}")
        if len(shape) > _MAX_DIMS:
            raise self.fail(f"tensor {i} has {len(shape)} dims (at most {_MAX_DIMS} are supported)")
        if math.prod(max(d, 1) for d in shape) * dt.itemsize >= 2 ** 62:
            raise self.fail(f"tensor {i} has an impossible shape {list(shape)!r} (too many elements)")
        count = math.prod(shape)
        if not (isinstance(offset, int) and isinstance(nbytes, int) and offset >= 0
                and nbytes == count * dt.itemsize):
            raise self.fail(f"tensor {i} has inconsistent offset/size ({offset}, {nbytes})")
        lo = self.start + offset
        if lo + nbytes > self.end:
            raise self.fail(f"tensor {i} lies past the end of the data (file truncated?)")
        return (dt, shape, count, lo, nbytes, requires_grad, parameter, str(device if device is not None else "cpu"))


def _flagged(t, requires_grad, parameter):
    """Tensor `t` as its record says: a Parameter (requiring grad unless the record says
    not), or requiring grad where it did and its dtype can."""
    if parameter:
        from .nn.parameter import Parameter
        return Parameter(t, requires_grad=requires_grad is None or bool(requires_grad))
    if requires_grad and t.dtype.differentiable:
        t.requires_grad = True
    return t


from .serialization_pickle import (add_safe_globals, clear_safe_globals, get_safe_globals,  # noqa: E402,F401
                                   safe_globals)
