"""The CPU backend's implementations of the matrix products (ops/linalg.py's MATMUL,
MATMUL_NT, MATMUL_TN): each product through `coreshare.matmul`'s route (BLAS's threads
by the cores the process may use, the hand-written kernels of gemm/ for the shapes BLAS
runs slowly), and for an eager plan's signature the route its shapes decide, chosen once
(`matmul_call`)."""
from __future__ import annotations

import numpy as np

from ....ops.linalg import matmul_rows
from ..runtime import coreshare

__all__ = ["matmul", "matmul_nt", "matmul_tn", "matmul_call", "nt_call", "tn_call"]


def blas_matmul(a, b):
    # on the BLAS threads the machine can give now, as compiled plans call it. With
    # another process on one of 2 cores, a 2-thread GEMM waits for the thread stuck behind
    # it: the eager LSTM LM step took 5-14 s on 2 BLAS threads against 1.3 s on one.
    return coreshare.matmul(a, b, blas_only=True)


def matmul(a, b):
    if a.ndim > 2 and b.ndim == 2:
        return matmul_rows(blas_matmul, a, b)
    return blas_matmul(a, b)


def _swap(x):
    return x.T if x.ndim == 2 else x.swapaxes(-1, -2)


def matmul_nt(a, b):
    return matmul(a, _swap(b))


def matmul_tn(a, b):
    return matmul(_swap(a), b)


def matmul_call(shapes, dtype, params):
    """An eager plan's call for one signature (ops/impls.py `specialize`): a product below
    coreshare's TINY_GEMM_MNK is numpy's matmul itself (coreshare.matmul leaves BLAS's
    threads alone for it: the small products of an eager step skip two Python frames),
    a larger 2-D one `blas_matmul`; batches of N-d by 2-D run `matmul` (one GEMM over the
    flattened leading dims)."""
    sa, sb = shapes
    if len(sa) > 2 and len(sb) == 2:
        return None
    if sa[-2] * sa[-1] * sb[-1] < coreshare.TINY_GEMM_MNK:
        return np.matmul
    return blas_matmul


def _nt_small(a, b):
    return np.matmul(a, b.T)


def _nt_blas(a, b):
    return coreshare.matmul(a, b.T, blas_only=True)


def _tn_small(a, b):
    return np.matmul(a.T, b)


def _tn_blas(a, b):
    return coreshare.matmul(a.T, b, blas_only=True)


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
