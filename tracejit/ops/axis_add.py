"""``view[..., idx, ...] += v`` with repeated positions, as a few slice adds.

The backward of an index along one dim (reflect, replicate and circular padding, nearest
upsampling, ``x[:, idx]``) adds the gradient back with repeats, which numpy's np.add.at
runs element by element: 40-70 ms for a (16, 32, 68, 72) reflect-pad gradient, where a
strided add of the same elements takes ~2 ms. Such an index is mostly a few arithmetic
runs (``2 1 0 1 2 ... 67 66 65``) or a few interleaved ones (``0 0 1 1 2 2``), so the add
is done as those runs' slice adds; other indexes with few repeats take rounds of distinct
positions. Each position gets its additions in the index's order, as np.add.at's, so the
result is bitwise np.add.at's.
"""
from __future__ import annotations

import numpy as np

from .distinct_add import wrapped

__all__ = ["add_along_axis"]

_MOST_PIECES = 16      # slice adds beyond which rounds (or np.add.at) are cheaper
_MOST_ROUNDS = 16      # repeats of one position beyond which np.add.at runs
_MOST_INDEX = 1 << 16  # index lengths from which the pieces' search costs more than it saves
_FULL = slice(None)


def add_along_axis(view: np.ndarray, key: tuple, v: np.ndarray) -> bool:
    """``view[key] += v`` with repeats accumulating in order, where `key` is whole slices
    around one 1-D integer array and `v` has the indexed shape. False (nothing done) for
    any other key, an index out of range, or an index with too many repeats of one
    position."""
    d = None
    for i, k in enumerate(key):
        if type(k) is slice:
            if k != _FULL:
                return False
        elif d is None and type(k) is np.ndarray and k.ndim == 1 and k.dtype.kind in "iu":
            d = i
        else:
            return False
    if d is None or d >= view.ndim or not 1 < key[d].size <= _MOST_INDEX:
        return False
    idx = wrapped(key[d], view.shape[d])
    if idx is None or type(v) is not np.ndarray or v.shape != view.shape[:d] + idx.shape + view.shape[d + 1:]:
        return False
    pieces = _pieces(idx)
    if pieces is None:
        return False
    pre = (_FULL,) * d
    for ks, js in pieces:
        view[pre + (js,)] += v[pre + (ks,)]
    return True


def _pieces(idx: np.ndarray):
    """(positions of `idx`, positions of the view) pairs, slices or index arrays, each
    reaching distinct view positions, whose adds in turn give every view position its
    additions in the order of `idx`; None where there would be too many."""
    il = idx.tolist()
    best = _runs(il)
    if best is None or len(best) > 2:
        other = _interleaved(idx, il)
        if other is not None and (best is None or len(other) < len(best)):
            best = other
    # (rounds only where no slices do: a fancy add costs several strided ones)
    return best if best is not None else _rounds(idx)


def _target(j0: int, n: int, step: int) -> slice:
    end = j0 + n * step
    return slice(j0, None if end < 0 else end, step)


def _runs(il: list):
    """Consecutive positions with one non-zero step between their targets, in order."""
    out, k, n = [], 0, len(il)
    while k < n:
        e = k + 1
        if e < n and il[e] != il[k]:
            step = il[e] - il[k]
            while e + 1 < n and il[e + 1] - il[e] == step:
                e += 1
            out.append((slice(k, e + 1), _target(il[k], e + 1 - k, step)))
            k = e + 1
        else:
            out.append((slice(k, k + 1), slice(il[k], il[k] + 1)))
            k += 1
        if len(out) > _MOST_PIECES:
            return None
    return out


def _interleaved(idx: np.ndarray, il: list):
    """``idx[r::p]`` for each r < p, each with one non-zero step (nearest upsampling's
    ``0 0 1 1 ...``), where the residues' order is the index's order at every target."""
    n = len(il)
    for p in range(2, min(_MOST_PIECES, n // 2) + 1):
        out = []
        for r in range(p):
            sub = il[r::p]
            step = sub[1] - sub[0] if len(sub) > 1 else 1
            if step == 0 or any(b - a != step for a, b in zip(sub, sub[1:])):
                break
            out.append((slice(r, None, p), _target(sub[0], len(sub), step)))
        else:
            order = np.argsort(idx, kind="stable")
            same = idx[order][1:] == idx[order][:-1]
            residue = order % p
            if (residue[1:] > residue[:-1])[same].all():
                return out
    return None


def _rounds(idx: np.ndarray):
    """Round r adds every position's r-th occurrence: distinct targets per round."""
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    rank = np.empty_like(order)
    rank[order] = np.arange(s.size) - np.searchsorted(s, s, "left")
    most = int(rank.max()) + 1
    if most > _MOST_ROUNDS:
        return None
    out = []
    for r in range(most):
        ks = np.flatnonzero(rank == r)
        out.append((ks, idx[ks]))
    return out
