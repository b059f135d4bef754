"""Selections along one dim (loader.py): ``topk``'s first k of the stable order (ARGSORT
with ``k``) as a numba loop, and ``argmax``/``argmin`` (ARGMAX, ARGMIN) as the kernel of a
group of that reduction alone, the lowering of a compiled program's argmax epilogue.

numpy's forms pay per row: ``argpartition`` then a sort of the k for topk (~10 ms for
2048 rows of 256, k 16: a point cloud's nearest neighbours), ``argmax`` over a short dim
(``max(dim=-1)`` over neighbours). Here one pass per row keeps the best k in order by
insertion, and one scan a row finds the extremum; over rows longer than ``ARG_BLOCK``
numpy's vectorized scan costs less and runs.

Both give the numpy form's indices exactly: ties keep input order (a later equal value
never displaces an earlier one), and an extremum is the first NaN where a row has one.
topk declines a row set that holds a NaN (the numpy form orders NaN as PyTorch does).
"""
from __future__ import annotations

import functools
from math import log

import numpy as np

from ....ops.reductions import ARGMAX, ARGMIN
from ....threads import PARALLEL_MIN
from .loader import kernel as _kernel, lowered, rendered, takes as _takes

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

def _insertion_pays(n: int, k: int) -> bool:
    """Whether keeping the best `k` of a row of `n` by insertion costs less than numpy's
    partial sort. On values in random order a row's pass inserts about k(1 + ln(n/k))
    times, each shifting about k/2 kept ones, against numpy's few passes over the row:
    measured single-threaded (both forms are), insertion wins up to about 4n shift steps
    (k 16 of 256: 0.8x the numpy form's time)."""
    return k * k * (1.0 + log(n / k)) <= 4.0 * n


def _loaded(name: str, source: str, dtype: str):
    return _kernel(("select", name, dtype), lambda: source.replace("{t}", dtype)).get()


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


def _arg_nest(prim, dtype: str, rank: int):
    """`prim` over dim 1 of a C-contiguous (rows, n) or (outer, n, inner) array (`rank`):
    the group of that reduction alone, lowered as a compiled program's argmax epilogue is."""
    from .... import dtypes
    from ....jit.ir import Eqn, Var
    from ....ops.registry import Aval
    from ....shapes import Sym
    from ... import fusion, loopnest
    shape = tuple(Sym.symbol(f"d{k}", 0) for k in range(rank))
    x, out = Var(Aval(shape, getattr(dtypes, dtype))), Var(Aval(shape[:1] + shape[2:], dtypes.int64))
    e = Eqn(prim, (x,), (out,), {"dim": 1, "keepdim": False})
    return loopnest.lower(fusion.Group(0, shape, [], e, [x], [out]), ("flat",))


@functools.cache
def _one_scan() -> int:
    """The longest row the generated kernel scans once (a longer row: numpy's vectorized
    scan costs less). Read at the first call: importing tracejit loads no lowering."""
    from ...loopnest import ARG_BLOCK
    return ARG_BLOCK


def _arg(prim):
    def impl(a, dim, keepdim):
        if (dim is None or type(a) is not np.ndarray or a.dtype not in _ARG_DTYPES or a.size < MIN_SIZE
                or a.shape[dim] > _one_scan()):
            return None
        dim %= a.ndim
        n = a.shape[dim]
        inner = int(np.prod(a.shape[dim + 1:], dtype=np.int64))
        rank = 2 if inner == 1 else 3
        parallel = a.size >= PARALLEL_MIN
        key = (prim.name, a.dtype.name, rank, parallel)
        fn = _arg_calls.get(key)
        if fn is None:
            nest = lowered(_arg_forms, key[:3], lambda: _arg_nest(prim, a.dtype.name, rank))
            fn = None if nest is None else rendered(("arg",) + key, nest, parallel)
            if fn is None:
                return None
            _arg_calls[key] = fn
        x = np.ascontiguousarray(a).reshape((-1, n) if rank == 2 else (-1, n, inner))
        out = np.empty(x.shape[:1] + x.shape[2:], np.int64)
        fn(x, out, *x.shape)
        return out.reshape(a.shape[:dim] + ((1,) if keepdim else ()) + a.shape[dim + 1:])
    impl.__name__ = prim.name
    return impl


_ARG_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))
_arg_forms: dict = {}   # (primitive, dtype) -> nest, or unsupported
_arg_calls: dict = {}   # the same plus the variant -> the loaded kernel
argmax = _arg(ARGMAX)   # ARGMAX's CPU implementation over one dim
argmin = _arg(ARGMIN)   # ARGMIN's
