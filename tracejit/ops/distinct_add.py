"""``view[key] += v`` for a key whose positions are all distinct: the backward of a gather
(ops/indexing.py's index_add numpy form tries it before np.add.at's per-element loop)."""
from __future__ import annotations

import numpy as np

__all__ = ["add_distinct", "distinct"]


def add_distinct(view, key, v) -> bool:
    """``view[key] += v`` as one fancy add when `key` (slices, None and integer arrays, each
    array on its own dim, as in the backward of ``x[None, rows]`` or ``w[rows, cols, None]``)
    reaches every element at most once, as a gather's backward does (packed sequences, a
    permutation): the add is then exact. False (nothing done) for another key
    or a repeated or out-of-range position (np.add.at's cases)."""
    flat = None
    d = -1   # the dim of `view` that `k` indexes (a None inserts one: it indexes none)
    for k in key:
        if k is None:
            continue
        d += 1
        if type(k) is np.ndarray and k.dtype.kind in "iu" and d < view.ndim:
            n, a = view.shape[d], k.reshape(-1)
            if a.size and a.dtype.kind == "i" and a.min() < 0:
                a = np.where(a < 0, a + n, a)
            if (a.size and (a.max() >= n or a.min() < 0)) or (flat is not None and a.size != flat.size):
                return False
            flat = a if flat is None else flat * n + a
        elif type(k) is not slice:
            return False
    if flat is None or not distinct(flat):
        return False
    view[key] += v
    return True


def distinct(flat) -> bool:
    """Whether the integers of 1-D `flat` (>= 0) are all different: a set for a few, a
    bincount where they are dense, else a sort."""
    if flat.size <= 64:
        return len(set(flat.tolist())) == flat.size
    if flat.max() <= 8 * flat.size:
        return np.bincount(flat).max() <= 1
    s = np.sort(flat)
    return not (s[1:] == s[:-1]).any()
