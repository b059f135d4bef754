"""Row-wise numba kernels for LayerNorm's backward, and the softmax rows the attention
kernels run one batch element at a time.

Why: LayerNorm's backward reduces along the last dim and then uses the reductions on the
same row. As numpy passes that is 4-6 full passes over memory (each LayerNorm backward of
the Transformer encoder step's 2048x256 rows took 5-7 ms where PyTorch's kernel takes
~1 ms, one thread). A row here is read into cache once: its statistics and its gradient
are computed while it stays there. It also sums the weight and bias gradients across rows
in the same pass, which no rows group does (a rows group reduces along its rows only).
LayerNorm's forward, softmax and cross-entropy have no kernel here: theirs are rendered
from their rows forms (row_forms.py); the softmax text below is what attention_kernels.py
splices.

The backward kernel runs ops/layer_norm_prim.py's ``layer_norm_backward``, eager and as a
compiled plan's step, so eager and compiled run one definition. Loaded with loader.py's
policy (background compile, numpy form until ready, sync mode loads at once).

Arithmetic: in the data's dtype, sums accumulated in float64 per row (LayerNorm: mean,
variance, and the backward's row sums; the weight/bias gradients across rows) or, for
softmax's sum of exponentials, in the data's dtype with reassociation (so it vectorizes;
a row of exponentials in (0, 1] loses nothing to speak of). exp is mathlib's vectorizable
one (numba's ``math.exp`` calls libm per element: ~10x slower here).
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as _kernel, takes as _takes

__all__ = ["softmax_kernel", "mask_rows", "softmax_backward_kernel", "layer_norm_backward_rows"]

_HEAD = '''
import numpy as np
from numba import njit
from tracejit.compiler.mathlib import exp_{s} as EXP
ROWMAXBITS
'''
_RO2 = "Array({t}, 2, 'C', readonly=True)"
_RO1 = "Array({t}, 1, 'C', readonly=True)"

# The row's max `mi`, taken on integer keys: a float's bits b as b ^ ((b >> 31) & 0x7fffffff)
# (64-bit: 63, 0x7fff...) order as the floats do (-0 just below +0), and an integer max
# loop vectorizes where LLVM leaves a float one scalar (its select-based max is no
# reduction it vectorizes without no-nans flags; 16 float lanes in a buffer stayed scalar
# too): 16x4x128x128 float32 rows, one thread, the max alone 0.47-0.52 -> 0.20-0.32 ms, the
# softmax kernel 1.03-1.05 -> 0.96-0.99 ms. The bits are read and the key turned back into
# the float by mathbits' bit casts (F2I, I2F: `ROW_MAX_BITS`, which the kernel's module
# imports), not through array views of the row and of a buffer the kernel allocated: numba
# compiled its view and np.empty implementations for those (0.2 s of a worker's first
# cross-entropy kernel) and the kernel carried NRT's reference counting; the same integer
# operations, so the same max. nan: a row holding one comes out all nan whatever its max
# (through exp and the sum), as numpy's form does.
_ROW_MAX = '''
        km = F2I(z[0])
        km = km ^ ((km >> np.{it}({sh})) & np.{it}({mask}))
        for k in range(n):
            b = F2I(z[k])
            key = b ^ ((b >> np.{it}({sh})) & np.{it}({mask}))
            km = key if key > km else km
        mi = I2F(km ^ ((km >> np.{it}({sh})) & np.{it}({mask})))'''

# the import line ROWMAX needs (its dtype's bit casts); `source` fills in ROWMAXBITS with it
ROW_MAX_BITS = "from tracejit.compiler.mathbits import {f2i} as F2I, {i2f} as I2F"
_BITS = {"float32": ("_f2i", "_i2f"), "float64": ("_d2i", "_i2d")}

# the integer type of a float dtype's bits, and its sign-shift and magnitude mask
_INT_KEY = {"float32": ("int32", "31", "0x7fffffff"), "float64": ("int64", "63", "0x7fffffffffffffff")}

_SOFTMAX = _HEAD + '''
@njit("void(" + RO2 + ", float64, {t}[:, ::1])", cache=CACHE, error_model='numpy', boundscheck=False,
      fastmath={'reassoc'}, nogil=True)
def kernel(x, scale, out):
    """out[i] = softmax(x[i] * scale) = exp((x[i] - max) * scale) / sum(...), scale > 0"""
    sc = np.{t}(scale)
    for i in range(x.shape[0]):
        z = x[i]
        o = out[i]
        n = z.shape[0]
ROWMAX
SOFTMAXEXP
'''
# softmax's row after its max `mi` (row `z` of `n` elements, output row `o`, scale `sc`):
# shared with attention_kernels.py
SOFTMAX_EXP = '''        s = np.{t}(0)
        for k in range(n):
            e = EXP((z[k] - mi) * sc)
            o[k] = e
            s += e
        for k in range(n):
            o[k] = o[k] / s'''

_SOFTMAX_MASKED = _HEAD + '''
@njit("void(" + RO2 + ", float64, " + RO2 + ", Array(int64, 1, 'C', readonly=True), {t}[:, ::1])",
      cache=CACHE, error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(x, scale, mask, rows, out):
    """out[i] = softmax(x[i] * scale + mask[rows[i]])"""
    sc = np.{t}(scale)
    for i in range(x.shape[0]):
        row = x[i]
        mrow = mask[rows[i]]
        z = out[i]
        n = z.shape[0]
        for k in range(n):
            z[k] = row[k] * sc + mrow[k]
ROWMAX
        s = np.{t}(0)
        for k in range(n):
            e = EXP(z[k] - mi)
            z[k] = e
            s += e
        for k in range(n):
            z[k] = z[k] / s
'''

_SOFTMAX_BACKWARD = _HEAD + '''
@njit("void(" + RO2 + ", " + RO2 + ", float64, {t}[:, ::1])", cache=CACHE, error_model='numpy',
      boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(g, y, scale, out):
    """out[i] = scale * (g[i] - sum(g[i] * y[i])) * y[i]"""
    for i in range(g.shape[0]):
        gr = g[i]
        yr = y[i]
        o = out[i]
SOFTMAXBWDROW
'''
# softmax's backward on one row (gradient row `gr`, output row `yr`, result row `o`, `scale`):
# shared with ops/attention_prim.py's backward kernel
SOFTMAX_BACKWARD_ROW = '''        s = 0.0
        for k in range(gr.shape[0]):
            s += gr[k] * yr[k]
        st = np.{t}(s)
        sc = np.{t}(scale)
        for k in range(gr.shape[0]):
            o[k] = sc * ((gr[k] - st) * yr[k])'''

# mean and 1/sqrt(var + eps) of `row` in one pass: sums of (x - shift), shift = the row's
# first element (so the variance does not cancel), in the data's dtype over blocks of at
# most BLOCK elements (reassociated: they vectorize) and in float64 across blocks; inlined
# as text (a helper function kept numba from caching the kernel). One pass instead of two
# (mean, then squared deviations): 0.15 -> 0.09 ms for 256x1024 float32 rows.
_ROW_STATS = '''
        n = row.shape[0]
        sh = row[0]
        s1 = 0.0
        s2 = 0.0
        for k0 in range(0, n, BLOCK):
            blk = row[k0:min(n, k0 + BLOCK)]
            a1 = np.{t}(0)
            a2 = np.{t}(0)
            for k in range(blk.shape[0]):
                d = blk[k] - sh
                a1 += d
                a2 += d * d
            s1 += a1
            s2 += a2
        shifted_mean = s1 / n
        mu = np.{t}(sh + shifted_mean)
        rstd = np.{t}(1.0 / np.sqrt(max(s2 / n - shifted_mean * shifted_mean, 0.0) + eps))'''
BLOCK = 4096

_LAYER_NORM_BACKWARD = _HEAD + '''
@njit("void(" + RO2 + ", " + RO2 + ", " + RO1 + ", float64, {t}[:, ::1])", cache=CACHE,
      error_model='numpy', boundscheck=False, fastmath={'reassoc'}, nogil=True)
def kernel(g, x, w, eps, out):
    """rows 0..M-1 of out: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w;
    row M: dweight = sum over rows of g * xhat; row M + 1: dbias = sum over rows of g"""
    m = x.shape[0]
    cols = x.shape[1]
    # weight/bias gradients: summed in the data's dtype over blocks of ROWS rows, in
    # float64 across blocks (float64 accumulators per element made this kernel 1.5x slower);
    # zeroed by a loop, not np.zeros (numba compiles np.zeros's implementation as functions
    # of their own, 0.07-0.10 s each in a compile worker)
    dw = np.empty(cols, np.float64)
    db = np.empty(cols, np.float64)
    dwb = np.empty(cols, np.{t})
    dbb = np.empty(cols, np.{t})
    for k in range(cols):
        dw[k] = 0
        db[k] = 0
        dwb[k] = 0
        dbb[k] = 0
    for i in range(m):
        row = x[i]
        gr = g[i]
        o = out[i]
STATS
        # the weight/bias block sums and the row's two sums in one loop over the row (two
        # loops paid the reads and the loop overhead twice: 2048x256 float32, ~15%)
        a = np.{t}(0)
        c = np.{t}(0)
        for k in range(n):
            gv = gr[k]
            xh = (row[k] - mu) * rstd
            dbb[k] += gv
            dwb[k] += gv * xh
            gw = gv * w[k]
            a += gw
            c += gw * xh
        at = a / np.{t}(n)
        ct = c / np.{t}(n)
        for k in range(n):
            xh = (row[k] - mu) * rstd
            o[k] = rstd * (gr[k] * w[k] - at - xh * ct)
        if i % ROWS == ROWS - 1 or i == m - 1:
            for k in range(cols):
                dw[k] += dwb[k]
                db[k] += dbb[k]
                dwb[k] = 0
                dbb[k] = 0
    for k in range(cols):
        out[m, k] = dw[k]
        out[m + 1, k] = db[k]
'''
ROWS = 64

_SUFFIX = {"float32": "f32", "float64": "f64"}


def source(template: str, dtype: str) -> str:
    """`template` with the shared pieces (row statistics, softmax's rows, block sizes, the
    dtype) filled in: how these kernels and attention_kernels.py's are written."""
    return (template.replace("SOFTMAXEXP", SOFTMAX_EXP).replace("SOFTMAXBWDROW", SOFTMAX_BACKWARD_ROW).replace('" + RO2 + "', _RO2).replace('" + RO1 + "', _RO1)
            .replace("STATS", _ROW_STATS)
            .replace("ROWMAXBITS", ROW_MAX_BITS).replace("ROWMAX", _ROW_MAX)
            .replace("{f2i}", _BITS[dtype][0]).replace("{i2f}", _BITS[dtype][1])
            .replace("BLOCK", str(BLOCK)).replace("ROWS", str(ROWS))
            .replace("{t}", dtype).replace("{s}", _SUFFIX[dtype]).replace("{it}", _INT_KEY[dtype][0])
            .replace("{sh}", _INT_KEY[dtype][1]).replace("{mask}", _INT_KEY[dtype][2]))


def _get(template, name, dtype):
    return _kernel(("rows", name, dtype), lambda: source(template, dtype)).get()


def _rows(a, k):
    """`a` as C-contiguous (M, k) rows (a copy only when it is not contiguous)."""
    return np.ascontiguousarray(a).reshape(-1, k)


def mask_rows(mask, shape):
    """(the mask's distinct rows as a C-contiguous (R, K) array, the row of it each of the
    (M, K) rows of `shape` adds): a broadcast mask is not copied out to full size."""
    k = shape[-1]
    m = mask.reshape((1,) * (len(shape) - mask.ndim) + mask.shape)
    if m.shape[-1] != k:
        m = np.broadcast_to(m, m.shape[:-1] + (k,))
    m2 = np.ascontiguousarray(m).reshape(-1, k)
    ids = np.arange(m2.shape[0], dtype=np.int64).reshape(m.shape[:-1])
    return m2, np.ascontiguousarray(np.broadcast_to(ids, tuple(shape[:-1]))).reshape(-1)


def softmax_kernel(xp, x, mask=None):
    """The softmax row kernel for arrays like `x` (and `mask`), or None (not numpy float32 /
    float64 arrays of one dtype, or the kernel is not ready): ``fn(x, scale, out)``, masked
    ``fn(x, scale, mask_rows, row_ids, out)`` on (M, K) rows (`mask_rows`); for callers that
    run it on many small pieces (attention_prim's weights, one batch element at a time)."""
    if not _takes(xp, *((x,) if mask is None else (x, mask))):
        return None
    if mask is None:
        return _get(_SOFTMAX, "softmax", x.dtype.name)
    return _get(_SOFTMAX_MASKED, "softmax_masked", x.dtype.name)


def softmax_backward_kernel(xp, g, y):
    """The softmax backward row kernel for arrays like `g` and `y`, or None (as
    `softmax_kernel`): ``fn(g, y, scale, out)`` on (M, K) rows, `out` not overlapping `g`
    (written over `g` the loops took their scalar versions, LLVM's runtime check finding
    the overlap: 0.60 against 0.39 ms for 16x4x128x128 float32 rows, one thread); for
    attention_prim's backward, one batch element at a time."""
    if not _takes(xp, g, y):
        return None
    return _get(_SOFTMAX_BACKWARD, "softmax_backward", y.dtype.name)


def _affine(w, fill, k, dtype):
    return np.full(k, fill, dtype) if w is None else _rows(w, k).reshape(k)


def layer_norm_backward_rows(xp, g, x, k, w, eps):
    """(M + 2, k): dx rows, then dweight and dbias, by the kernel, or None."""
    arrays = (g, x) + ((w,) if w is not None else ())
    if not _takes(xp, *arrays) or x.size == 0 or g.shape != x.shape:
        return None
    fn = _get(_LAYER_NORM_BACKWARD, "layer_norm_backward", x.dtype.name)
    if fn is None:
        return None
    g2, x2 = _rows(g, k), _rows(x, k)
    out = np.empty((x2.shape[0] + 2, k), x.dtype)
    fn(g2, x2, _affine(w, 1, k, x.dtype), float(eps), out)
    return out


# ---------------------------------------------------------------- the primitives' implementations
# (registered by compiler/cpu/implementations.py: the primitive's arrays and params in, its
# result out, or None where the kernel is not loaded yet and the numpy form runs)
def layer_norm_backward(g, x, *w, n, eps, has_w):
    from ....ops.layer_norm_prim import row_size
    return layer_norm_backward_rows(np, g, x, row_size(x, n), w[0] if has_w else None, eps)
