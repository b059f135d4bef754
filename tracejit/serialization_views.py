"""Tensors that share memory, saved once and loaded as views of one storage again.

``tracejit.save`` of several CPU tensors over one buffer (``x`` and ``x[1:]``,
``w`` and ``w.t()``) writes the span of the buffer they cover once, as a 1-D storage record, and each
tensor as ``{"view": [storage, offset, shape, strides, requires_grad, parameter]}``
(offset and strides in elements). Loading makes each of them a strided numpy view of
that one array, so they share memory again, as ``torch.load`` gives back tensors that
share a storage. Tensors whose memory nothing else saved shares are written whole, as before.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from .tensor import Tensor

__all__ = ["StorageGroups", "view_array"]


def _root(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _walk(obj, out: List[Tensor], depth: int = 0) -> None:
    if depth > 200:
        return
    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _walk(v, out, depth + 1)
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk(v, out, depth + 1)


class StorageGroups:
    """Which tensors of `obj` share a CPU buffer with another of them, and the span of the
    buffer (in elements) that covers them all."""

    def __init__(self, obj):
        from .device import CPU
        tensors: List[Tensor] = []
        _walk(obj, tensors)
        by_root: Dict[int, list] = {}
        seen = set()
        for t in tensors:
            if id(t) in seen or t.device is not CPU or not isinstance(t._data, np.ndarray):
                continue
            seen.add(id(t))
            root = _root(t._data)
            by_root.setdefault(id(root), [root]).append(t)
        self.member: Dict[int, tuple] = {}   # id(tensor) -> (storage array, element offset, strides)
        self._keep = tensors
        for root, *members in by_root.values():
            if len(members) > 1:
                self._group(root, members)

    def _group(self, root: np.ndarray, members: List[Tensor]) -> None:
        item = members[0]._data.dtype
        if any(t._data.dtype != item for t in members) or not root.flags.c_contiguous:
            return
        size = item.itemsize
        base = _address(root)
        places = []
        for t in members:
            a = t._data
            off = _address(a) - base
            if off % size or any(s % size or s < 0 for s in a.strides):
                return
            strides = tuple(s // size for s in a.strides)
            extent = 1 + sum((d - 1) * s for d, s in zip(a.shape, strides)) if a.size else 0
            places.append((off // size, strides, extent))
        lo = min(p[0] for p in places)
        hi = max(p[0] + p[2] for p in places)
        if (hi - lo) * size > root.nbytes:
            return
        flat = np.frombuffer(root, dtype=np.uint8)[lo * size:hi * size].view(item)
        for t, (off, strides, _) in zip(members, places):
            self.member[id(t)] = (flat, off - lo, strides)


def view_array(storage: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """The strided view of 1-D `storage` a view record names; raises ValueError if it
    reaches outside `storage`."""
    shape, strides = tuple(shape), tuple(strides)
    if any(s < 0 for s in strides) or offset < 0 or len(shape) != len(strides):
        raise ValueError("negative offset or stride, or shape and strides of different lengths")
    if 0 not in shape and offset + sum((d - 1) * s for d, s in zip(shape, strides)) >= storage.shape[0]:
        raise ValueError(f"view of shape {list(shape)} at offset {offset} reaches past its storage "
                         f"of {storage.shape[0]} elements")
    size = storage.dtype.itemsize
    if 0 in shape:
        offset, strides = 0, (0,) * len(shape)
    # (an ndarray over `storage`: its .base is the storage, so views find their common root)
    return np.ndarray(shape, storage.dtype, buffer=storage, offset=offset * size,
                      strides=tuple(s * size for s in strides))
