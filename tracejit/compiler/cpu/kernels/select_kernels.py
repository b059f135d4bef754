"""Selections along one dim as numba loops (loader.py): ``topk``'s first k of the stable
order (ARGSORT with ``k``) and ``argmax``/``argmin`` (ARGMAX, ARGMIN).

numpy's forms pay per row: ``argpartition`` then a sort of the k for topk (~10 ms for
2048 rows of 256, k 16: a point cloud's nearest neighbours), ``argmax`` over a short last
dim (~5 ms for 65536 rows of 16: ``max(dim=-1)`` over neighbours). Here one pass per row
keeps the best k in order by insertion, and one pass finds the extremum.

Both give the numpy form's indices exactly: ties keep input order (a later equal value
never displaces an earlier one), and an extremum is the first NaN where a row has one.
topk declines a row set that holds a NaN (the numpy form orders NaN as PyTorch does).
"""
from __future__ import annotations

from math import log

import numpy as np

from .loader import kernel as _kernel, takes as _takes

__all__ = ["topk_indices", "argmax", "argmin"]

# Below these many elements numpy's forms cost less than the call's preparation (~3 us).
MIN_SIZE = 2048

_TOPK = '''
from numba import njit


@njit("boolean({t}[:, ::1], int64, boolean, int64[:, ::1], {t}[::1])", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(x, k, largest, out, buf):
    """out[r] = the indices of row r's k best values (largest or smallest), best first,
    ties in input order; False (out unfinished) where a row holds a NaN."""
    rows, n = x.shape
    for r in range(rows):
        row = x[r]
        o = out[r]
        m = 0
        for j in range(n):
            v = row[j]
            if v != v:
                return False
            if m == k:
                w = buf[k - 1]
                if (v <= w) if largest else (v >= w):
                    continue
                p = k - 1
            else:
                p = m
                m += 1
            # shift the worse ones down; an equal earlier value stays ahead
            while p > 0 and ((buf[p - 1] < v) if largest else (buf[p - 1] > v)):
                buf[p] = buf[p - 1]
                o[p] = o[p - 1]
                p -= 1
            buf[p] = v
            o[p] = j
    return True
'''

_ARG = '''
from numba import njit


@njit("void({t}[:, :, ::1], boolean, int64[:, ::1], {t}[::1])", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(x, largest, out, best):
    """out[o, i] = the first index j of x[o, :, i]'s extremum (its first NaN, if any)."""
    outer, n, inner = x.shape
    if inner == 1:   # a row's values are contiguous: scan each in one loop
        for o in range(outer):
            row = x[o, :, 0]
            b = row[0]
            at = 0
            if b == b:
                for j in range(1, n):
                    v = row[j]
                    if v != v:
                        at = j
                        break
                    if (v > b) if largest else (v < b):
                        b = v
                        at = j
            out[o, 0] = at
        return
    for o in range(outer):
        io = out[o]
        for i in range(inner):
            best[i] = x[o, 0, i]
            io[i] = 0
        for j in range(1, n):
            row = x[o, j]
            for i in range(inner):
                b = best[i]
                v = row[i]
                if b == b and (v != v or ((v > b) if largest else (v < b))):
                    best[i] = v
                    io[i] = j
'''


def _insertion_pays(n: int, k: int) -> bool:
    """Whether keeping the best `k` of a row of `n` by insertion costs less than numpy's
    partial sort. On values in random order a row's pass inserts about k(1 + ln(n/k))
    times, each shifting about k/2 kept ones, against numpy's few passes over the row:
    measured single-threaded (both forms are), insertion wins up to about 4n shift steps
    (k 16 of 256: 0.8x the numpy form's time)."""
    return k * k * (1.0 + log(n / k)) <= 4.0 * n


def _loaded(name: str, source: str, dtype: str):
    return _kernel(("select", name, dtype), lambda: source.replace("{t}", dtype)).get()


def _rows_of(a: np.ndarray, dim: int):
    """`a` as C-contiguous (outer, n, inner) around `dim` (a view where it is one)."""
    n = a.shape[dim]
    outer = int(np.prod(a.shape[:dim], dtype=np.int64))
    return np.ascontiguousarray(a).reshape(outer, n, -1)


def topk_indices(a, dim, descending, stable, k=None):
    """ARGSORT's CPU implementation for ``k`` set (topk) with k a small part of a float
    dim (`_insertion_pays`): the k best indices, best first; None (the numpy form runs)
    otherwise, while the kernel is not loaded, or where a NaN is present."""
    if k is None or not _takes(np, a) or a.ndim == 0:
        return None
    dim %= a.ndim
    n = a.shape[dim]
    if not 0 < k * 4 < n or a.size < MIN_SIZE or not _insertion_pays(n, k):
        return None
    fn = _loaded("topk", _TOPK, a.dtype.name)
    if fn is None:
        return None
    x = np.ascontiguousarray(np.moveaxis(a, dim, -1))
    lead = x.shape[:-1]
    x = x.reshape(-1, n)
    out = np.empty((x.shape[0], k), np.int64)
    if not fn(x, k, bool(descending), out, np.empty(k, a.dtype)):
        return None
    return np.ascontiguousarray(np.moveaxis(out.reshape(lead + (k,)), -1, dim))


def _arg(largest: bool):
    def impl(a, dim, keepdim):
        if dim is None or not _takes(np, a) or a.ndim == 0 or a.size < MIN_SIZE:
            return None
        fn = _loaded("arg", _ARG, a.dtype.name)
        if fn is None:
            return None
        dim %= a.ndim
        x = _rows_of(a, dim)
        out = np.empty((x.shape[0], x.shape[2]), np.int64)
        fn(x, largest, out, np.empty(x.shape[2], a.dtype))
        shape = a.shape[:dim] + ((1,) if keepdim else ()) + a.shape[dim + 1:]
        return out.reshape(shape)
    impl.__name__ = "argmax" if largest else "argmin"
    return impl


argmax = _arg(True)   # ARGMAX's CPU implementation over one dim
argmin = _arg(False)  # ARGMIN's
