"""An embedding's backward (``index_add`` of rows with repeats) as one numba loop (loader.py).

ops/indexing.py's numpy form adds the updates in rounds of distinct rows (~1.8-2 ms a step
for the LSTM LM). Here the updates are added one after another in order of appearance, as
np.add.at does (so the result is bitwise the same), each row one vectorized loop.
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as _kernel, takes as _takes

__all__ = ["add_rows", "embedding_bag", "embedding_bag_backward"]

# v's rows, contiguous whatever its other strides, as the flat span they lie in and the
# element strides of its first two axes: each row's add vectorizes (typed 'A', the inner
# stride is unknown to LLVM and the loop stays scalar), and v, often a transposed view (an
# embedding's gradient), is read in place (0.39 against 0.74 ms copied, 2048 x 256).
_ADD_ROWS_FLAT = '''
from numba import njit


@njit("void({t}[:, ::1], int64[:, ::1], Array({t}, 1, 'C', readonly=True), int64, int64)", cache=CACHE,
      error_model='numpy', boundscheck=False)
def kernel(out, rows, flat, s0, s1):
    """out[rows[i, j]] += flat[i * s0 + j * s1:][:e] for (i, j) in C order"""
    e = out.shape[1]
    p, q = rows.shape
    for i in range(p):
        for j in range(q):
            dst = out[rows[i, j]]
            o = i * s0 + j * s1
            src = flat[o:o + e]
            for k in range(e):
                dst[k] += src[k]
'''


def add_rows(dtype: str):
    """The loaded row-add kernel for `dtype` (float32/float64), or None (run numpy)."""
    if dtype not in ("float32", "float64"):
        return None
    return _kernel(("index", "add_rows_flat", dtype), lambda: _ADD_ROWS_FLAT.replace("{t}", dtype)).get()


def run_add_rows(add, view: np.ndarray, flat: np.ndarray, v: np.ndarray, index_shape: tuple) -> None:
    """``view[index] += v`` in order with kernel `add`: view C-contiguous (n, ...), flat the
    in-range row of each update (the index in C order, of `index_shape`, no zero dim), v of
    shape index_shape + view.shape[1:]."""
    q = index_shape[-1]
    p = flat.size // q
    rows = np.ascontiguousarray(flat.reshape(p, q), dtype=np.int64)
    v3 = v.reshape(p, q, -1)     # a view where v's strides allow, else a copy
    span = _row_span(v3)
    if span is None:             # rows not contiguous (or strides negative): copied first
        v3 = np.ascontiguousarray(v3)
        span = _row_span(v3)
    item = v3.itemsize
    add(view.reshape(view.shape[0], -1), rows, span, v3.strides[0] // item, v3.strides[1] // item)


def _row_span(v3: np.ndarray):
    """The memory v3 (p, q, e) lies in as a read-only 1-D array starting at v3[0, 0, 0],
    where its rows are contiguous and its strides non-negative whole elements; else None."""
    item = v3.itemsize
    st = v3.strides
    if v3.shape[2] > 1 and st[2] != item or any(s < 0 or s % item for s in st[:2]):
        return None
    n = 1 + sum((d - 1) * s for d, s in zip(v3.shape[:2], st[:2])) // item + v3.shape[2] - 1
    root = v3
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.flags.c_contiguous:
        # a view of the array owning the memory (~2 us; as_strided takes ~50 us a call)
        off = v3.ctypes.data - root.ctypes.data
        if 0 <= off and off + n * item <= root.nbytes:
            span = np.ndarray((n,), v3.dtype, buffer=root, offset=off)
            span.flags.writeable = False
            return span
    return np.lib.stride_tricks.as_strided(v3, shape=(n,), strides=(item,), writeable=False)


def index_add(a, v, *idx, spec):
    """INDEX_ADD's CPU implementation (compiler/cpu/implementations.py) for whole rows added
    by one integer index array on the first dim of a float array (an embedding's backward):
    one loop over the updates in order, np.add.at's additions in np.add.at's order; None
    (the numpy form runs) for any other index or while the kernel is not loaded."""
    if len(idx) != 1:
        # (asked first: two index arrays, as in the backward of ``w[rows, cols]``, are never
        # such an add, and the checks below cost more than np.add.at of a few elements)
        return None
    from ....ops.donation import target
    from ....ops.indexing import _is_basic, _locate, added_rows
    if _is_basic(spec) or not _takes(np, a, v) or a.size == 0:
        return None
    add = add_rows(a.dtype.name)
    if add is None:
        return None
    out = target(a)   # (`a` itself where donated; declining below leaves it unwritten)
    view, key = _locate(out, spec, idx)
    if not view.flags.c_contiguous:
        return None
    flat = added_rows(view, key, v)
    if flat is None:
        return None
    run_add_rows(add, view, flat, v, key[0].shape)
    return out


def _bagged(form):
    """EMBEDDING_BAG's or EMBEDDING_BAG_BACKWARD's CPU implementation: its numpy form
    (ops/embedding_bag.py `bag_forward`, `bag_backward`) with sums added by `add_rows`' loop
    (numpy's reduceat: ~55 us for 512 bags of 16-wide rows; np.add.at of the weight
    gradient's 3300 rows: ~50 us); None while the kernel loads."""
    def call(*arrays, **params):
        from ....ops import embedding_bag as forms
        add = add_rows(arrays[0].dtype.name)
        if add is None:
            return None

        def add_bag_rows(out, idx, rows):
            if idx.size:
                run_add_rows(add, out, idx, rows, idx.shape)
            return out
        return getattr(forms, form)(*arrays, add=add_bag_rows, **params)
    call.__name__ = form
    return call


embedding_bag, embedding_bag_backward = _bagged("bag_forward"), _bagged("bag_backward")


def sums_bags(*arrays, mode, **params) -> bool:
    """The embedding_bag calls the loop adds: rows (the weight's, or the gradient's) of a
    kernel's dtype summed, not maxima."""
    return mode != "max" and _takes(np, arrays[0])
