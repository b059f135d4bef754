"""PyTorch's ``_utils.collate``: ``default_collate`` / ``default_convert``, and the
extensible ``collate(batch, collate_fn_map=...)`` that dispatches each sample's type to a
function of a map (``default_collate_fn_map`` holds the built-in ones), so a program can
collate a type of its own and keep the default for the rest."""
from __future__ import annotations

import collections.abc
from typing import Callable, Optional

import numpy as np

from ....tensor import Tensor
from ..dataloader import _is_namedtuple, default_collate, default_convert

__all__ = ["default_collate", "default_convert", "collate", "default_collate_fn_map",
           "collate_tensor_fn", "collate_numpy_array_fn", "collate_numpy_scalar_fn", "collate_float_fn",
           "collate_int_fn", "collate_str_fn"]


def collate(batch, *, collate_fn_map: Optional[dict] = None):
    """Collate `batch` (a list of samples): a sample whose type (or a base class of it) is a
    key of `collate_fn_map` goes to that function, called as ``fn(batch,
    collate_fn_map=collate_fn_map)``; mappings, named tuples and sequences are collated
    field by field; any other type raises TypeError."""
    if not isinstance(batch, (list, tuple)) or not batch:
        raise ValueError("collate: expected a non-empty list of samples")
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for kind, fn in collate_fn_map.items():
            if isinstance(elem, kind):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        out = {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
        try:
            return elem_type(out)
        except TypeError:   # a mapping type that cannot be built from a dict
            return out
    if _is_namedtuple(elem):
        return elem_type(*(collate(list(s), collate_fn_map=collate_fn_map) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence) and not isinstance(elem, (str, bytes)):
        size = len(elem)
        if any(len(s) != size for s in batch):
            raise RuntimeError("collate: each element in list of batch should be of equal size")
        fields = [collate(list(s), collate_fn_map=collate_fn_map) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        try:
            return elem_type(fields)
        except TypeError:
            return fields
    raise TypeError(f"collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {elem_type.__name__} (add it to collate_fn_map)")


def _leaf(batch, *, collate_fn_map: Optional[dict] = None):
    return default_collate(batch)


def collate_str_fn(batch, *, collate_fn_map: Optional[dict] = None):
    return batch


collate_tensor_fn: Callable = _leaf
collate_numpy_array_fn: Callable = _leaf
collate_numpy_scalar_fn: Callable = _leaf
collate_float_fn: Callable = _leaf
collate_int_fn: Callable = _leaf

default_collate_fn_map: dict = {Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
                                np.bool_: collate_numpy_scalar_fn, np.number: collate_numpy_scalar_fn,
                                float: collate_float_fn, int: collate_int_fn, str: collate_str_fn,
                                bytes: collate_str_fn}
