"""The CPU backend's implementations of the matrix products (ops/linalg.py's MATMUL,
MATMUL_NT, MATMUL_TN): each product runs as the measured choice for its key
(compiler/cpu/gemm/choice.py) makes it, on the GEMM template (template.py) or on numpy's
BLAS with the thread policy's count (coreshare.blas_product); `product` takes an epilogue
(bias, residual, ReLU) too, which the template applies as it stores and BLAS's side after.
For an eager plan's signature the call is chosen once (`matmul_call`)."""
from __future__ import annotations

import numpy as np

from ..runtime import coreshare
from . import choice, template

__all__ = ["matmul", "matmul_nt", "matmul_tn", "matmul_call", "nt_call", "tn_call", "product",
           "TEMPLATE_MIN_MNK"]

# Products below this many multiply-adds always run on BLAS (no choice is asked for): the
# template's launch (a numba call and its threads' wake-up, 8-35 us) costs more than such a
# product takes (a 64x64x64 float32 product: 9 us on one BLAS thread).
TEMPLATE_MIN_MNK = coreshare.TINY_GEMM_MNK
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def product(a, b, bias=None, residual=None, act=None):
    """``act(a @ b + bias + residual)`` for a (..., m, k) and b (k, n) or (..., k, n) of the
    same batch: the template's configuration where the choice for its key is one and its
    kernel is loaded, else BLAS (and the epilogue after it). An N-d `a` times a 2-D `b` is
    one product over a's flattened leading dims (ops/linalg.py `matmul_rows`)."""
    if a.ndim > 2 and b.ndim == 2:
        lead = a.shape[:-1]
        r = None if residual is None else np.broadcast_to(residual, lead + (b.shape[-1],)).reshape(-1, b.shape[-1])
        return product(a.reshape(-1, a.shape[-1]), b, bias, r, act).reshape(lead + (b.shape[-1],))
    if (a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype and a.dtype in _FLOATS
            and (b.ndim == 2 or a.shape[:-2] == b.shape[:-2])):
        if a.shape[-2] * a.shape[-1] * b.shape[-1] >= TEMPLATE_MIN_MNK:
            threads = coreshare.core_share.threads() if coreshare.ENABLED else coreshare.core_share.cpus
            c = choice.choose(choice.key_for(a, b, threads))
            if c is not choice.BLAS:
                fn = template.kernel_for(a.dtype.name, c).get()
                if fn is not None:
                    coreshare.adapt()
                    out = template.run(fn, c, a, b, bias=bias, residual=residual, act=act, threads=threads)
                    if out is not None:
                        return out
    out = blas_matmul(a, b)
    if bias is not None:
        out += bias
    if residual is not None:
        out += residual
    if act == "relu":
        np.maximum(out, 0, out=out)
    return out


def blas_matmul(a, b):
    # on the BLAS threads the machine can give now, as compiled plans call it. With
    # another process on one of 2 cores, a 2-thread GEMM waits for the thread stuck behind
    # it: the eager LSTM LM step took 5-14 s on 2 BLAS threads against 1.3 s on one.
    # (coreshare.matmul: BLAS on the policy's threads, and the few-row, thin and two-core
    # kernels it still routes to until the template's choice covers their shapes)
    return coreshare.matmul(a, b, True)   # (blas_only)


def matmul(a, b):
    return product(a, b)


def _swap(x):
    return x.T if x.ndim == 2 else x.swapaxes(-1, -2)


def matmul_nt(a, b):
    return matmul(a, _swap(b))


def matmul_tn(a, b):
    return matmul(_swap(a), b)


def matmul_call(shapes, dtype, params):
    """An eager plan's call for one signature (ops/impls.py `specialize`): a product below
    `TEMPLATE_MIN_MNK` is numpy's matmul itself (BLAS keeps it on one thread; the small
    products of an eager step skip two Python frames), a larger 2-D one `matmul`; batches of
    N-d by 2-D run the implementation (one GEMM over the flattened leading dims)."""
    sa, sb = shapes
    if len(sa) > 2 and len(sb) == 2:
        return None
    if sa[-2] * sa[-1] * sb[-1] < TEMPLATE_MIN_MNK:
        return np.matmul
    return matmul


def _nt_small(a, b):
    return np.matmul(a, b.T)


def _nt_blas(a, b):
    return product(a, b.T)


def _tn_small(a, b):
    return np.matmul(a.T, b)


def _tn_blas(a, b):
    return product(a.T, b)


def _transposed_call(small, blas, swap_a):
    """The plan call of a transposed-operand record, 2-D operands: `matmul_call`'s choice
    for the product it computes (m, k, n of a @ b.T or a.T @ b, not of the stored operands)."""
    def call(shapes, dtype, params):
        sa, sb = shapes
        if len(sa) != 2 or len(sb) != 2:
            return None   # batches: the implementation
        product = ((sa[1], sa[0]), sb) if swap_a else (sa, (sb[1], sb[0]))
        return small if matmul_call(product, dtype, params) is np.matmul else blas
    return call


nt_call = _transposed_call(_nt_small, _nt_blas, False)
tn_call = _transposed_call(_tn_small, _tn_blas, True)
