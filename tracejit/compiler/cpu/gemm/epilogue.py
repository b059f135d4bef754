"""A product's epilogue at run time, for the compiled plans' GEMM steps
(compiler/gemm_steps.py).

``template_site``: a plan's product with an epilogue runs on the GEMM template where the
measured choice is a configuration, else on the BLAS side the plan emits after it.
``matmul_bias``: C filled with the bias, then BLAS with beta=1, which costs no more than
the product alone (as PyTorch's ``addmm``).

The bias added inside BLAS's accumulation may differ from the unfused form by rounding,
and a -0.0 bias element filled by the k=1 product reads +0.0.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..runtime import coreshare
from ..runtime.coreshare import TINY_GEMM_MNK, adapt, gemm_threads
from . import products, template
from .blas_gemm import gemm_address, matmul
from ....ops.linalg import matmul_rows
from ....threads import blas_threads

__all__ = ["matmul_bias", "template_site", "may_use_template", "FILL_MIN"]

_DTYPES = ("float32", "float64")
# Output elements from which the bias fill is a k=1 GEMM on BLAS's threads (`_fill`), each
# thread writing the part its share of the following GEMM reads.
FILL_MIN = 1 << 18


_gemms: dict = {}    # numpy dtype -> cblas ?gemm as a ctypes function, or None


def _cblas(dtype):
    """ctypes function of numpy's BLAS cblas_?gemm for `dtype` (a numpy dtype), or None."""
    fn = _gemms.get(dtype, False)
    if fn is not False:
        return fn
    name = np.dtype(dtype).name
    found = gemm_address(name) if name in _DTYPES else None
    fn = None
    if found is not None:
        addr, bits = found
        i = ctypes.c_int64 if bits == 64 else ctypes.c_int
        f = ctypes.c_float if name == "float32" else ctypes.c_double
        p = ctypes.c_void_p
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, f,
                              p, i, p, i, f, p, i)(addr)
    _gemms[dtype] = fn
    return fn


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def matmul_bias(xp, x, w, b):
    """``x @ w + b`` (b: n values in any shape (1, ..., n)): the output filled with b, then
    one GEMM with beta=1; the product and an add where numpy's BLAS cannot be called so."""
    n = w.shape[1]
    k = x.shape[-1]
    if x.size * n < TINY_GEMM_MNK:
        # BLAS keeps such a product on one thread by itself, and the fill, the thread
        # settings and three ctypes pointers cost more than the add they save (a 1x8 @
        # 8x16 linear: 4.3 us against 1.6 for the product and the add)
        out = matmul_rows(matmul, x, w) if x.ndim > 2 else matmul(x, w)
        return xp.add(out, b.reshape(n), out=out)
    fn = _cblas(x.dtype) if xp is np and x.dtype == w.dtype == b.dtype else None
    # w's flags read once (w.T C-contiguous is w F-contiguous): each ``flags`` and each view
    # is a new object, and this runs on caches the forward's GEMMs and row kernels swept
    wf = w.flags
    w_c = wf.c_contiguous
    w_trans = wf.f_contiguous and not w_c
    if (fn is None or not x.flags.c_contiguous or not (w_c or w_trans)
            or w.shape[0] != k or k == 0 or n == 0):
        out = matmul_rows(matmul, x, w) if x.ndim > 2 else matmul(x, w)
        return xp.add(out, b.reshape(n), out=out)
    lead = x.shape[:-1]
    m = x.size // k if k else 0
    out = np.empty(lead + (n,), dtype=x.dtype)
    if m == 0:
        return out
    adapt()
    with gemm_threads(m, k, n):
        _fill(fn, out, np.ascontiguousarray(b.reshape(n)), m, n)
        fn(_ROW_MAJOR, _NO_TRANS, _TRANS if w_trans else _NO_TRANS, m, n, k, 1.0,
           x.ctypes.data, k, w.ctypes.data, k if w_trans else n, 1.0, out.ctypes.data, n)
    return out


_ones: dict = {}   # dtype -> the longest ones vector `_ones_for` has made


def _ones_for(m: int, dtype):
    """m ones of `dtype` (a view of one kept vector: `_fill` calls it every step with the
    same lengths)."""
    ones = _ones.get(dtype)
    if ones is None or ones.shape[0] < m:
        ones = np.ones(m, dtype)
        ones.flags.writeable = False     # shared: no caller may write it
        _ones[dtype] = ones
    return ones[:m]


def _fill(fn, out, row, m: int, n: int) -> None:
    """The (m, n) C-contiguous `out` set to `row` in every row: from `FILL_MIN` elements on
    two or more BLAS threads as the k=1 product ``ones(m, 1) @ row`` (exactly the bias),
    each thread writing what its share of the next GEMM reads; else numpy's assignment."""
    if m * n < FILL_MIN or (blas_threads() or 1) < 2:
        out[...] = row
        return
    ones = _ones_for(m, out.dtype)
    fn(_ROW_MAJOR, _NO_TRANS, _NO_TRANS, m, n, 1, 1.0, ones.ctypes.data, 1, row.ctypes.data, n,
       0.0, out.ctypes.data, n)


# ---- the template's side ------------------------------------------------------------------

def may_use_template(a_shape: tuple, b_shape: tuple) -> bool:
    """Whether a product of these (plan) shapes may ever run on the template: not where its
    static size is below products.TEMPLATE_MIN_MNK (such a site asks nothing at run time)."""
    dims = (*a_shape, *b_shape)
    if not all(type(d) is int for d in dims):
        return True
    m = 1
    for d in a_shape[:-1]:
        m *= d
    return m * a_shape[-1] * b_shape[-1] >= products.TEMPLATE_MIN_MNK


def _blas_side(x, w, bias, residual):
    return None    # (the plan runs the BLAS side of the step)


def template_site(act, install):
    """The first call of a plan's product with an epilogue: binds the site to its key and
    installs the template's launch, or `_blas_side` (None: BLAS then the epilogue); a later
    measurement installs again. Operands the template does not take keep `_blas_side`."""
    def first(x, w, bias, residual):
        a = x.reshape(-1, x.shape[-1]) if x.ndim > 2 else x
        launch = products.bind_site(a, w, _blas_side, install, lambda c, dt: _launch(c, dt, act))
        return launch(x, w, bias, residual)
    return first


def _launch(cfg, dtype: str, act):
    """The call that runs a site's products with their epilogue on the configuration `cfg`
    (None while its kernel is not loaded or the operands' layout does not fit)."""
    kern = template.kernel_for(dtype, cfg)
    run = template.run
    cpus = coreshare.core_share.cpus

    def call(x, w, bias, residual):
        fn = kern.fn
        if fn is None:
            kern.get()
            return None
        n = w.shape[1]
        flat = x.ndim == 2
        a = x if flat else x.reshape(-1, x.shape[-1])
        b = None if bias is None else bias.reshape(n)
        r = None if residual is None else residual.reshape(a.shape[0], n)
        out = run(fn, cfg, a, w, bias=b, residual=r, act=act, threads=coreshare.adapt() or cpus)
        if out is None or flat:
            return out
        return out.reshape(x.shape[:-1] + (n,))
    return call
