"""The CPU kernel of a copy of a transposed matrix (or a batch of them) into C order.

numpy copies a view whose last two dims are swapped in the result's order, reading the
source a column at a time: each read is a cache line of its own, and ``x.t().contiguous()``
of a (256, 512) float32 ran 4-7x PyTorch's time. Here the copy goes by tiles that stay in
cache, each transposed in registers by the recurrent loops' block transpose
(register_transpose.py, called by address). A copy is bitwise whatever copies it. Other
layouts (and integers, and copies below `MIN_ELEMENTS`) take numpy's copy. Loaded with
loader.py's policy: calls decline while the kernel compiles.
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as _kernel
from .register_transpose import transpose_import

__all__ = ["copy", "takes", "specialize", "MIN_ELEMENTS"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# Below this numpy's copy of a source in cache beats the call: float32 (64, 128) took 3 us
# there against 6 here, (128, 128) 11 against 7
MIN_ELEMENTS = 1 << 14
# A tile's source and destination (2 x 64 x 64 float32: 32 KiB) stay in L1/L2
_TILE = 64
_ready: dict = {}   # dtype -> the loaded kernel (dtype.name costs ~1 us a call)

_SOURCE = '''
import numpy as np
from numba import njit
from tracejit.compiler.cpu.runtime.voidptr import call_at, native_address
{transpose}
_FN = native_address(panel_transpose)


@njit("void(Array({t}, 3, 'C', readonly=True), {t}[:, :, ::1], int64)",
      cache=CACHE, error_model="numpy", boundscheck=False, nogil=True)
def tiles(src, dst, fn):
    """dst[b] = src[b].T tile by tile"""
    nb, rows, cols = src.shape
    for b in range(nb):
        s = src[b]
        d = dst[b]
        for i0 in range(0, rows, {tile}):
            i1 = min(i0 + {tile}, rows)
            for j0 in range(0, cols, {tile}):
                call_at(fn, panel_transpose, (s, i0, i1, j0, min(j0 + {tile}, cols), d, False))


def kernel(src, dst):
    tiles(src, dst, _FN)
'''


def _source(dtype: str) -> str:
    return (_SOURCE.replace("{transpose}", transpose_import(dtype)).replace("{tile}", str(_TILE))
            .replace("{t}", dtype))


def takes(x) -> bool:
    """Whether `copy` may take `x`: a float32/float64 array of `MIN_ELEMENTS` or more whose
    last two dims swapped are C-contiguous, and which is not C-contiguous itself."""
    return (type(x) is np.ndarray and x.dtype in _DTYPES and x.ndim >= 2 and x.size >= MIN_ELEMENTS
            and not x.flags.c_contiguous and x.swapaxes(-1, -2).flags.c_contiguous)


def copy(x):
    """COPY's implementation: `x` in new C-ordered memory, or None (declined)."""
    if not takes(x):
        return None
    fn = _ready.get(x.dtype)
    if fn is None:
        name = x.dtype.name
        fn = _kernel(("transpose_copy", name), lambda: _source(name)).get()
        if fn is None:
            return None
        _ready[x.dtype] = fn
    rows, cols = x.shape[-2], x.shape[-1]
    out = np.empty(x.shape, x.dtype)
    fn(x.swapaxes(-1, -2).reshape(-1, cols, rows), out.reshape(-1, rows, cols))
    return out


def specialize(shapes, dtype, params):
    """COPY's plan call for one signature: numpy's copy where no call may be taken, else
    the kernel where the operand's layout is one it takes (numpy's copy while it loads)."""
    shape = shapes[0] if len(shapes) == 1 else None
    if not shape:
        return None    # (a 0-d operand: the record's own call, as numpy's form plans it)
    if len(shape) < 2 or np.dtype(dtype) not in _DTYPES or np.prod(shape) < MIN_ELEMENTS:
        return np.ndarray.copy

    def call(x):
        if not x.flags.c_contiguous:
            y = copy(x)
            if y is not None:
                return y
        return x.copy()
    return call
