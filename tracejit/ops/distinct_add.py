"""``view[key] += v`` for a key whose positions are all distinct: the backward of a gather
(ops/indexing.py's index_add numpy form tries it before np.add.at's per-element loop)."""
from __future__ import annotations

import numpy as np

__all__ = ["add_distinct", "distinct", "within", "wrapped"]

def add_distinct(view, key, v) -> bool:
    """``view[key] += v`` as one fancy add when `key` (slices, None and integer arrays, each
    array on its own dim, as in the backward of ``x[None, rows]`` or ``w[rows, cols, None]``)
    reaches every element at most once, as a gather's backward does (packed sequences, a
    permutation, a boolean mask's positions): the add is then exact. False (nothing done)
    for another key or a repeated or out-of-range position (np.add.at's cases)."""
    flat = None
    shape = None
    whole = True   # every item an integer array of one shape: `flat` is the C-order position
    d = -1   # the dim of `view` that `k` indexes (a None inserts one: it indexes none)
    for k in key:
        if k is None:
            whole = False
            continue
        d += 1
        if type(k) is np.ndarray and k.dtype.kind in "iu" and d < view.ndim:
            n, a = view.shape[d], wrapped(k.reshape(-1), view.shape[d])
            if a is None or (flat is not None and a.size != flat.size):
                return False
            if shape is None:
                shape = k.shape
            elif k.shape != shape:
                whole = False
            flat = a if flat is None else flat * n + a
        elif type(k) is not slice:
            return False
        else:
            whole = False
    if flat is None or not distinct(flat):
        return False
    if (whole and d == view.ndim - 1 and type(v) is np.ndarray and v.shape == shape
            and view.flags.c_contiguous):
        # one index into the flat view, not one per dim (half the add of a mask's backward)
        view.reshape(-1)[flat] += v.reshape(-1)
    else:
        view[key] += v
    return True


def wrapped(a, n: int):
    """The int64 positions of 1-D `a` along a dim of size `n`, negative ones counted from
    the end; None where one is out of range."""
    if not a.size or within(a, n):
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "u":
        return None
    a = np.where(a < 0, a.astype(np.int64, copy=False) + n, a)
    return a if within(a, n) else None


def within(a, n: int) -> bool:
    """Whether the integers of non-empty `a` all lie in [0, n), in one reduction: a negative
    one read as unsigned is past any n the dtype holds (min and max cost twice this, most
    of a small gather). A broadcast dim (stride 0: an expanded index) is read once."""
    if type(a) is np.ndarray and 0 in a.strides and a.size > 1:
        # (``batch[:, None].expand(-1, 64)`` of 800 rows: 800 values checked, not 51200)
        a = a[tuple([slice(0, 1) if st == 0 else slice(None) for st in a.strides])]
    if a.size <= _FEW and type(a) is np.ndarray:
        # (a few as Python ints: a reduction's call costs ~1.5 us, 3x this, for a topk's
        # one index a row)
        v = a.ravel().tolist()
        return min(v) >= 0 and max(v) < n
    if a.dtype.kind == "i":
        if n > 1 << (8 * a.dtype.itemsize - 1):   # (-1 of int8 read as 255 would pass n = 1000)
            return int(a.min()) >= 0 and int(a.max()) < n
        a = a.view(_UNSIGNED[a.dtype.itemsize])
    return int(a.max()) < n


_FEW = 16
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def distinct(flat) -> bool:
    """Whether the integers of 1-D `flat` (>= 0) are all different: a set for a few, an
    increasing run (a mask's positions are) seen in one pass, a bincount where they are
    dense, else a sort."""
    if flat.size <= 64:
        return len(set(flat.tolist())) == flat.size
    if flat[0] < flat[-1] and (flat[1:] > flat[:-1]).all():
        return True
    if flat.max() <= 8 * flat.size:
        return np.bincount(flat).max() <= 1
    s = np.sort(flat)
    return not (s[1:] == s[:-1]).any()
