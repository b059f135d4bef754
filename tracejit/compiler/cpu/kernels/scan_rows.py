"""CPU kernels of cumsum, cumprod and prod along a C-contiguous tensor's last dim(s).

numpy accumulates and multiplies along a contiguous last axis one row at a time, paying
~0.1 us a row before any work: a float32 cumsum over the last dim of (64, 128, 32) ran ~7x
slower than here, a prod ~4x. Neither has a generated form (the rows renderer folds sums
and extrema only, and a scan is no reduction), so each is a small kernel walking the rows
once, in the numpy form's order: a running sum or product per row in float64 for the
scans (as `ops.reductions._accumulate`, and PyTorch's CPU kernels), each value rounded to
the dtype; a product in the dtype, term after term as np.multiply.reduce's loop. The
results are the numpy form's bit for bit. Anything else (integers, a scan along another
dim, a strided input, an empty row, a product of fewer than `PROD_ROWS_MIN` rows)
declines and the numpy form runs. Loaded with loader.py's policy: calls decline
while the kernel compiles.
"""
from __future__ import annotations

import math

import numpy as np

from ....ops import impls
from ....ops.reductions import PROD
from .loader import kernel as _kernel

__all__ = ["cumsum", "cumprod", "prod", "takes_scan", "takes_prod", "specialize_scan", "specialize_prod",
           "PROD_ROWS_MIN"]

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


# Products of fewer rows are left to numpy, whose call costs less there: float32 (32, 8)
# took 2.2 us either way, (64, 8) 3.0 against 2.3 here. (Scans gain from 8 values on.)
PROD_ROWS_MIN = 64


_ready: dict = {}   # (kernel, dtype) -> the loaded kernel (dtype.name costs ~1 us a call)


def _loaded(which: str, source: str, dt: np.dtype):
    fn = _ready.get((which, dt))
    if fn is None:
        name = dt.name
        fn = _kernel(("scan_rows", which, name), lambda: source.replace("{t}", name)).get()
        if fn is not None:
            _ready[(which, dt)] = fn
    return fn


def takes_scan(x, dim) -> bool:
    """Whether `cumsum`/`cumprod` may take the call (the implementation table's checker):
    a nonempty C-contiguous float32/float64 array scanned along its last dim."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.size > 0
            and dim % x.ndim == x.ndim - 1 and x.flags.c_contiguous)


_SOURCES = {"cumsum": _SCAN.replace("{op}", "+"), "cumprod": _SCAN.replace("{op}", "*")}


def _run_scan(which: str, x):
    k = _loaded(which, _SOURCES[which], x.dtype)
    if k is None:
        return None
    out = np.empty(x.shape, x.dtype)
    n = x.shape[-1]
    k(x.reshape(-1, n), out.reshape(-1, n))
    return out


def _scan(which: str):
    def fn(x, dim):
        return _run_scan(which, x) if takes_scan(x, dim) else None
    fn.__name__ = fn.__qualname__ = which + "_last"
    return fn


cumsum = _scan("cumsum")
cumprod = _scan("cumprod")


def specialize_scan(prim):
    """cumsum's or cumprod's plan call for one eager signature: the kernel where the
    signature is one it takes (the numpy form for a strided operand, or while it loads),
    else the numpy form."""
    which = prim.name

    def call_for(shapes, dtype, params):
        plain = impls.numpy_form(prim, params)
        shape = shapes[0] if len(shapes) == 1 else None
        if not shape or np.dtype(dtype) not in _DTYPES or 0 in shape \
                or params["dim"] % len(shape) != len(shape) - 1:
            return plain

        def call(x):
            if x.flags.c_contiguous:
                y = _run_scan(which, x)
                if y is not None:
                    return y
            return plain(x)
        return call
    return call_for


def _rows(shape: tuple, dims) -> tuple | None:
    """(rows, row length) of reducing `shape` over `dims`, its last dims, where there are
    `PROD_ROWS_MIN` rows or more and none is empty, else None."""
    nd, k = len(shape), len(dims)
    if not 0 < k <= nd:
        return None
    for d in dims:
        if not nd - k <= d % nd < nd:
            return None
    n = math.prod(shape[nd - k:])
    m = math.prod(shape[:nd - k])
    return (m, n) if n > 0 and m >= PROD_ROWS_MIN and len(set(dims)) == k else None


def takes_prod(x, dims, keepdim) -> bool:
    """Whether `prod` may take the call: a C-contiguous float32/float64 array reduced over
    its last dims, in `PROD_ROWS_MIN` rows or more, none of them empty."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.flags.c_contiguous
            and _rows(x.shape, dims) is not None)


def _run_prod(x, mn: tuple, shape: tuple):
    k = _loaded("prod", _PROD, x.dtype)
    if k is None:
        return None
    out = np.empty(shape, x.dtype)
    k(x.reshape(mn), out.reshape(mn[0]))
    return out


def _out_shape(shape: tuple, dims, keepdim: bool) -> tuple:
    nd = len(shape) - len(dims)
    return tuple(shape[:nd]) + (1,) * (len(dims) if keepdim else 0)


def prod(x, dims, keepdim):
    """PROD's implementation: the products of the rows over `dims`, or None (declined)."""
    if type(x) is not np.ndarray or x.dtype not in _DTYPES or not x.flags.c_contiguous:
        return None
    mn = _rows(x.shape, dims)
    return None if mn is None else _run_prod(x, mn, _out_shape(x.shape, dims, keepdim))


def specialize_prod(shapes, dtype, params):
    """PROD's plan call for one eager signature: the kernel where the signature is one it
    takes (the numpy form for a strided operand, or while it loads), else the numpy form."""
    plain = impls.numpy_form(PROD, params)
    shape = shapes[0] if len(shapes) == 1 else None
    dims, keepdim = tuple(params["dims"]), params["keepdim"]
    mn = None if shape is None or np.dtype(dtype) not in _DTYPES else _rows(tuple(shape), dims)
    if mn is None:
        return plain
    out_shape = _out_shape(tuple(shape), dims, keepdim)

    def call(x):
        if x.flags.c_contiguous:
            y = _run_prod(x, mn, out_shape)
            if y is not None:
                return y
        return plain(x)
    return call
