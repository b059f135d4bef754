"""CPU kernels of cumsum, cumprod and prod along a C-contiguous tensor's last dim(s).

numpy accumulates and multiplies along a contiguous last axis one row at a time, paying
~0.1 us a row before any work: a float32 cumsum over the last dim of (64, 128, 32) ran 9x
slower than here, a prod 6x. Neither has a generated form (the rows renderer folds sums
and extrema only, and a scan is no reduction), so each is a small kernel walking the rows
once, in the numpy form's order: a running sum or product per row in float64 for the
scans (as `ops.reductions._accumulate`, and PyTorch's CPU kernels), each value rounded to
the dtype; a product in the dtype, term after term as np.multiply.reduce's loop. The
results are the numpy form's bit for bit. Anything else (integers, a scan along another
dim, a strided input, an empty row) declines and the numpy form runs. Loaded with
loader.py's policy: calls decline while the kernel compiles.
"""
from __future__ import annotations

import math

import numpy as np

from .loader import kernel as _kernel

__all__ = ["cumsum", "cumprod", "prod", "takes_scan", "takes_prod"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

_SCAN = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 2, 'C', readonly=True), {t}[:, ::1])",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, out):
    """out[i, j] = x[i, 0] {op} ... {op} x[i, j], folded in float64 in order"""
    m, n = x.shape
    for i in range(m):
        acc = np.float64(x[i, 0])   # (not 0 + x: a leading -0.0 stays -0.0, as numpy's)
        out[i, 0] = acc
        for j in range(1, n):
            acc {op}= np.float64(x[i, j])
            out[i, j] = acc
'''

_PROD = '''
import numpy as np
from numba import njit


@njit("void(Array({t}, 2, 'C', readonly=True), {t}[::1])",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def kernel(x, out):
    """out[i] = x[i, 0] * ... * x[i, n - 1], multiplied in the dtype in order"""
    m, n = x.shape
    for i in range(m):
        acc = x[i, 0]
        for j in range(1, n):
            acc *= x[i, j]
        out[i] = acc
'''


def _loaded(which: str, source: str, dt: np.dtype):
    def text():
        return source.replace("{t}", dt.name)
    return _kernel(("scan_rows", which, dt.name), text).get()


def takes_scan(x, dim) -> bool:
    """Whether `cumsum`/`cumprod` may take the call (the implementation table's checker):
    a C-contiguous float32/float64 array of at least one value, scanned along its last dim."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.ndim >= 1 and x.size > 0
            and dim % x.ndim == x.ndim - 1 and x.flags.c_contiguous)


def _scan(which: str, op: str):
    source = _SCAN.replace("{op}", op)

    def fn(x, dim):
        if not takes_scan(x, dim):
            return None
        k = _loaded(which, source, x.dtype)
        if k is None:
            return None
        out = np.empty(x.shape, x.dtype)
        n = x.shape[-1]
        k(x.reshape(-1, n), out.reshape(-1, n))
        return out
    fn.__name__ = fn.__qualname__ = which + "_last"
    return fn


cumsum = _scan("cumsum", "+")
cumprod = _scan("cumprod", "*")


def _rows(shape: tuple, dims) -> tuple | None:
    """(rows, row length) of reducing `shape` over `dims`, its last dims, else None."""
    nd, k = len(shape), len(dims)
    if not 0 < k <= nd or tuple(sorted(d % nd for d in dims)) != tuple(range(nd - k, nd)):
        return None
    n = math.prod(shape[nd - k:])
    m = math.prod(shape[:nd - k])
    return (m, n) if n > 0 and m > 0 else None


def takes_prod(x, dims, keepdim) -> bool:
    """Whether `prod` may take the call: a C-contiguous float32/float64 array reduced over
    its last dims, none of them empty."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.flags.c_contiguous
            and _rows(x.shape, tuple(dims)) is not None)


def prod(x, dims, keepdim):
    """PROD's implementation: the products of the rows over `dims`, or None (declined)."""
    if not takes_prod(x, dims, keepdim):
        return None
    k = _loaded("prod", _PROD, x.dtype)
    if k is None:
        return None
    m, n = _rows(x.shape, tuple(dims))
    nd = x.ndim - len(dims)
    out = np.empty(x.shape[:nd] + (1,) * (len(dims) if keepdim else 0), x.dtype)
    k(x.reshape(m, n), out.reshape(m))
    return out
