"""Self-attention's weights, context and backward one batch element at a time: the CPU
backend's implementations of ops/attention_prim.py's primitives.

Each batch element's scores go into a buffer that stays in cache and are normalized from
there. A part of the batch split over the cores is one nogil numba call where it can be (a
Python-driven part made the other core's part wait for the GIL).
"""
from __future__ import annotations

import numpy as np

from ....ops.attention_prim import _TO_HEADS, _parts, _split, backward_parts, backward_slice
from ....ops.softmax_prim import SOFTMAX, SOFTMAX_BACKWARD, softmax_passes
from ..gemm.blas_gemm import GEMM_SOURCE, gemm_address
from ..runtime import sharepool as _sharepool
from . import row_forms
from .loader import kernel as _kernel, takes as _takes

__all__ = ["weights", "context", "backward"]


# OpenBLAS's small-matrix kernels take a product only up to 100^3 multiply-adds; one head's
# 128x128x64 product is just over it, and its two 64-row halves with a contiguous right
# operand run faster than the packed whole (the backward: ~12% less time, same bits).
_SMALL_GEMM = 100 ** 3


def _block_rows(t: int, n: int, k: int) -> int:
    """Rows per block for a stack of (t x k) @ (k x n) products: halves where the whole product
    is over `_SMALL_GEMM` multiply-adds and a half is not, else ``t`` (whole products)."""
    h = t // 2
    return h if t % 2 == 0 and h * n * k <= _SMALL_GEMM < t * n * k else t


def _row_blocks(x, r: int):
    """(..., T, c) array as a (..., T // r, r, c) view: splitting one axis is a view for any
    strides, and 0.2 us where as_strided takes 3.6."""
    return x.reshape(x.shape[:-2] + (x.shape[-2] // r, r, x.shape[-1]))


def _head_products(a, b, out, r: int, buf) -> None:
    """``out[...] = a @ b`` for batch elements' heads, numpy arrays: ``a`` (E, H, T, k) and
    ``b`` (E, H, k, n) of any strides; in ``r``-row blocks with ``b`` copied into ``buf`` (E,
    H, 1, k, n, C-contiguous) where ``r`` < T (`_block_rows`), else one product per head."""
    if r == a.shape[-2]:
        np.matmul(a, b, out=out)
        return
    np.copyto(buf[..., 0, :, :], b)
    np.matmul(_row_blocks(a, r), buf, out=_row_blocks(out, r))


def _head_products_t(a, b, out, r: int, buf, tr) -> None:
    """``out[...] = a @ b^T`` for batch elements' heads, ``b`` (E, H, n, k): in ``r``-row
    blocks with ``b^T`` written into ``buf`` by the kernel ``tr``, else one product per
    head with ``b`` transposed in BLAS (slower in its small-matrix path)."""
    if tr is None or r == a.shape[-2]:
        np.matmul(a, np.swapaxes(b, -1, -2), out=out)
        return
    tr(b, buf)
    np.matmul(_row_blocks(a, r), buf, out=_row_blocks(out, r))


# out[e, h, 0] = x[e, h]^T for (E, H, T, d) head stacks of any strides, 16 rows of x at a
# time (each row of out written a cache line at a time): 11 us where numpy took 47
_TRANSPOSE = """
import numpy as np
from numba import njit

@njit("void(Array({t}, 4, 'A', readonly=True), Array({t}, 5, 'C'))", cache=CACHE,
      error_model='numpy', boundscheck=False, nogil=True)
def kernel(x, out):
    ne, nh, t, hd = x.shape
    tb = t - t % 16
    for i in range(ne):
        for h in range(nh):
TRANSPOSED(out, x)
"""


def _transpose_kernel(xp, x):
    """The transposing copy for head stacks like `x` (compiler/cpu/kernels/loader.py's policy: None for other
    array modules and dtypes, or while it is not ready)."""
    if not _takes(xp, x):
        return None
    dtype = x.dtype.name
    return _kernel(("attention", "transpose", dtype),
                   lambda: _transposed_in(_TRANSPOSE, ("out", "x")).replace("{t}", dtype)).get()


# Batch elements a part runs per numpy call: each call holds the GIL for its Python side,
# and two elements' scores (512 KB float32) still stay in cache
_CHUNK = 2


def _chunk(lo: int, hi: int) -> int:
    return max(1, min(_CHUNK, hi - lo))


# attention_backward's part [lo, hi) as one nogil call: its four products (through numpy's
# cblas_?gemm by address) and softmax's backward rows. Driven from Python, the threads'
# parts wait for each other's GIL (two-thread backward: ~10% more time).
_BACKWARD_PART = """
import numpy as np
from numba import njit
GEMM
ROWS

_A = "Array({t}, 4, 'A', readonly=True)"
_W = "Array({t}, 4, 'A')"


@njit("void(int64, Array({t}, 4, 'C', readonly=True), " + _A + ", " + _A + ", " + _A + ", " + _A
      + ", " + _W + ", " + _W + ", " + _W + ", float64, int64, int64, int64, {t}[:, ::1], {t}[:, ::1], "
      "{t}[:, ::1], {t}[:, ::1])", cache=CACHE,
      error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(fn, w, gh, q, kk, vv, ov, oq, ok, scale, r, lo, hi, dw, ds, rb, vt):
    nh, t, hd = q.shape[1], q.shape[2], q.shape[3]
    ldv, ldq, ldk = ov.strides[2] // ov.itemsize, oq.strides[2] // oq.itemsize, ok.strides[2] // ok.itemsize
    ldg = gh.strides[2] // gh.itemsize
    tb = t - t % 16
    for i in range(lo, hi):
        for h in range(nh):
            wi = w[i, h]
            for a in range(t):                      # dv = w^T g
                for j in range(hd):
                    rb[a, j] = gh[i, h, a, j]
            for b0 in range(0, t, r):
                gemm(fn, True, r, hd, t, wi[:, b0:], t, rb, hd, ov[i, h, b0:], ldv, 0.0)
            # dw = g v^T
TRANSPOSED(vt, vv)
            for b0 in range(0, t, r):
                gemm(fn, False, r, t, hd, gh[i, h, b0:], ldg, vt, t, dw[b0:], t, 0.0)
            softmax_backward_rows(dw, wi, ds, t, t)  # through softmax
            for a in range(t):                      # dq = ds k
                for j in range(hd):
                    rb[a, j] = kk[i, h, a, j]
            for b0 in range(0, t, r):
                gemm(fn, False, r, hd, t, ds[b0:], t, rb, hd, oq[i, h, b0:], ldq, 0.0)
            for a in range(t):                      # dk = ds^T q
                for j in range(hd):
                    rb[a, j] = q[i, h, a, j]
            for b0 in range(0, t, r):
                gemm(fn, True, r, hd, t, ds[:, b0:], t, rb, hd, ok[i, h, b0:], ldk, 0.0)
"""


# `weights`' part [lo, hi) without a mask as one nogil call, for the same reason.
_FORWARD_PART = """
import numpy as np
from numba import njit
GEMM
ROWS

_A = "Array({t}, 4, 'A', readonly=True)"


@njit("void(int64, " + _A + ", " + _A + ", float64, {t}[:, :, :, ::1], "
      "int64, int64, int64, {t}[:, ::1], {t}[:, ::1])", cache=CACHE,
      error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(fn, q, kk, scale, w, r, lo, hi, sb, kt):
    nh, t, hd = q.shape[1], q.shape[2], q.shape[3]
    ldq = q.strides[2] // q.itemsize
    tb = t - t % 16
    for i in range(lo, hi):
        for h in range(nh):
TRANSPOSED(kt, kk)
            for b0 in range(0, t, r):               # scores q k^T
                gemm(fn, False, r, t, hd, q[i, h, b0:], ldq, kt, t, sb[b0:], t, 0.0)
            softmax_rows(sb, w[i, h], t, t)         # softmax rows into w
"""


# the transposing copy of head (i, h) of SRC into the (d, T) buffer DST, 16 rows at a time:
# `_TRANSPOSE`'s body and the part kernels'  (`_transposed_in`)
_TRANSPOSED = """            for r0 in range(0, tb, 16):
                for j in range(hd):
                    for a in range(r0, r0 + 16):
                        DST[j, a] = SRC[i, h, a, j]
            for a in range(tb, t):
                for j in range(hd):
                    DST[j, a] = SRC[i, h, a, j]"""


# where each buffer's element (j, a) is: the standalone kernel writes head (i, h) of its 5-d
# output in place, the part kernels a 2-d buffer of their own
_DST_INDEX = {"out": "out[i, h, 0, j, a]"}


def _transposed_in(template: str, *pairs) -> str:
    """`template` with each ``TRANSPOSED(dst, src)`` line replaced by `_TRANSPOSED`'s loop
    (one text for the standalone transposing kernel and the part kernels)."""
    for dst, src in pairs:
        loop = _TRANSPOSED.replace("DST[j, a]", _DST_INDEX.get(dst, f"{dst}[j, a]"))
        template = template.replace(f"TRANSPOSED({dst}, {src})", loop.replace("SRC", src))
    return template


def _gemm_kernel(name: str, template: str, rows: tuple, xp, *arrays):
    """(a part kernel made from `template` with the GEMM intrinsic and, for ``ROWS``, the
    rows-form kernel `rows` names, its GEMM address); (None, address) while it is compiled
    or loaded in the background; or None (other array modules or dtypes, no BLAS GEMM, the
    kernel failed or is off). On (None, address) the callers run numpy's form and ask for
    none of their fallback's kernels, which would take a compile worker only to go idle."""
    if not _takes(xp, *arrays):
        return None
    dtype = arrays[0].dtype.name
    found = gemm_address(dtype)
    if found is None:
        return None
    address, bits = found
    prim, count, params, fname = rows

    def source():
        gemm = GEMM_SOURCE.replace("{t}", dtype).replace("{bits}", str(bits))
        body = _transposed_in(template, ("kt", "kk"), ("vt", "vv"))
        return (body.replace("GEMM", gemm)
                .replace("ROWS", row_forms.kernel_source(prim, count, dtype, params, fname))
                .replace("{t}", dtype))
    k = _kernel(("attention", name, dtype, bits, tuple(sorted(params.items()))), source)
    fn = k.get()
    if fn is None:
        return (None, address) if k.coming() else None
    return fn, address


def _forward_part_kernel(xp, qkv, scale=1.0):
    """(weights' part kernel, GEMM address) for a `qkv` like this one and
    softmax `scale`, or None (`_gemm_kernel`: the kernel None while it is on its way)."""
    rows = (SOFTMAX, 1, {"dim": 1, "scale": float(scale)}, "softmax_rows")
    return _gemm_kernel("forward_part", _FORWARD_PART, rows, xp, qkv)


def _backward_part_kernel(xp, w, gh, qkv, scale=1.0):
    """(attention_backward's part kernel, GEMM address) for arrays like these, or None
    (as `_gemm_kernel`; weights not C-contiguous)."""
    if not w.flags.c_contiguous:
        return None
    rows = (SOFTMAX_BACKWARD, 2, {"dim": 1, "scale": float(scale)}, "softmax_backward_rows")
    return _gemm_kernel("backward_part", _BACKWARD_PART, rows, xp, w, gh, qkv)


def softmax_kernel(xp, x, *mask):
    """softmax's rows-form kernel (row_forms.py) for scores like `x` and `mask`, as
    ``fn(s, scale, out, *mask) -> bool`` (False: not loaded yet, `out` not written), or None
    (not numpy float arrays of one dtype)."""
    if not _takes(xp, x, *mask):
        return None

    def fn(s, scale, out, *m):
        got = row_forms.run(SOFTMAX, (s,) + m, {"dim": s.ndim - 1, "scale": float(scale)}, out=[out])
        return got is not None
    return fn


def weights(qkv, *mask, tokens, heads, seq_first, scale):
    """`attention_weights`' impl."""
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    _, (q, k, _) = _parts(np, qkv, tokens, heads, seq_first)
    n, t = (c, a) if seq_first else (a, c)
    # the part kernel (no mask) first: while it is on its way numpy's form runs, and the
    # fallback form's kernels are not asked for (`_gemm_kernel`)
    found = None if mask else _forward_part_kernel(np, qkv, scale)
    whole = found if found is not None and found[0] is not None else None
    fn = softmax_kernel(np, qkv, *mask) if found is None else None
    if fn is None and whole is None:   # other dtypes, or no kernel ready yet
        s = np.matmul(q, np.swapaxes(k, -1, -2))
        return softmax_passes(np, s, mask[0] if mask else None, 3, scale)
    w = np.empty((n, heads, t, t), dtype=qkv.dtype)
    rows = heads * t                                   # softmax rows per batch element
    w2 = w.reshape(n * rows, t)
    if mask:     # (as 4-d, its batch elements sliced with the scores' where it has them)
        m4 = mask[0].reshape((1,) * (4 - mask[0].ndim) + mask[0].shape)
    rs, tr = _block_rows(t, t, hd), (None if whole is not None else _transpose_kernel(np, qkv))

    def part(lo, hi):
        # `_CHUNK` batch elements at a time: scores into a cached buffer, their softmax into
        # w (not in place: overlap makes the row loops scalar)
        if whole is not None:
            bufs = [np.empty(shape, dtype=w.dtype) for shape in ((t, t), (hd, t))]
            return whole[0](whole[1], q, k, scale, w, rs, lo, hi, *bufs)
        ch = _chunk(lo, hi)
        s = np.empty((ch, heads, t, t), dtype=w.dtype)
        kb = np.empty((ch, heads, 1, hd, t), dtype=w.dtype)
        for i in range(lo, hi, ch):
            j = min(i + ch, hi)
            m = j - i
            _head_products_t(q[i:j], k[i:j], s[:m], rs, kb[:m], tr)
            if mask:
                mi = m4[i:j] if m4.shape[0] > 1 else m4
                if not fn(s[:m], scale, w[i:j], mi):    # (not loaded yet)
                    w[i:j] = softmax_passes(np, s[:m], mi, 3, scale)
            elif not fn(s[:m].reshape(m * rows, t), scale, w2[i * rows:j * rows]):
                w[i:j] = softmax_passes(np, s[:m], None, 3, scale)
    _sharepool.split(part, n, n * heads * t * t * (hd + _SOFTMAX_WORK))
    return w


# multiply-adds a softmax element counts as in `split`'s threshold (one thread: a
# 16x4x128x128 float32 softmax 1.3 ms, a 128x64x128 product ~30 us)
_SOFTMAX_WORK = 32


def context(qkv, w, *, tokens, heads, seq_first, scale):
    # (scale: only the VJP reads it)
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    _, (_, _, v) = _parts(np, qkv, tokens, heads, seq_first)
    out = np.empty((a, c, heads, hd), dtype=qkv.dtype)
    oh = out.transpose(_TO_HEADS[seq_first])

    n, _, t, s = w.shape
    r = _block_rows(t, hd, s)

    def part(lo, hi):
        # in small-matrix blocks
        ch = _chunk(lo, hi)
        vb = np.empty((ch, heads, 1, s, hd), dtype=w.dtype)
        for i in range(lo, hi, ch):
            j = min(i + ch, hi)
            _head_products(w[i:j], v[i:j], oh[i:j], r, vb[:j - i])
    _sharepool.split(part, n, n * heads * t * s * hd)
    return out.reshape(a, c, e)


def backward(g, qkv, w, *, tokens, heads, seq_first, scale):
    """`attention_backward`'s impl: the packed gradient."""
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    q, k, v, gh, out, (oq, ok, ov) = backward_parts(np, g, qkv, tokens, heads, seq_first)
    n, _, t, s = w.shape
    # the part kernel; while it is on its way (or where there is none) numpy's form runs
    # (`backward_slice`)
    found = _backward_part_kernel(np, w, g, qkv, scale)
    whole = found if found is not None and found[0] is not None else None
    r = _block_rows(t, hd, s)

    def part(lo, hi):
        if whole is None:
            return backward_slice(np, slice(lo, hi), w, gh, q, k, v, oq, ok, ov, scale)
        # its (T, T) weight gradients in two buffers that stay in cache
        bufs = [np.empty(shape, dtype=w.dtype) for shape in ((t, s), (t, s), (s, hd), (hd, s))]
        return whole[0](whole[1], w, gh, q, k, v, ov, oq, ok, scale, r, lo, hi, *bufs)
    _sharepool.split(part, n, 4 * n * heads * t * s * hd)
    return out.reshape(a * c, 3 * e)
