"""Matrix multiplication (to BLAS through numpy/cupy) and its composites."""
from __future__ import annotations

import numpy as _np

from .. import coreshare as _coreshare
from ..errors import DTypeError, ShapeError
from ..shapes import broadcast_shapes
from .registry import Aval, _make_binary, bind, defprim
from . import shape as _shape
from .shape import reshape, unsqueeze
from ..autograd.node import column_major, shape_only

__all__ = ["matmul", "mm", "bmm", "linear", "outer", "dot", "mv"]


def _matmul_rule(a, b):
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"matmul: internal rank error {a.shape} @ {b.shape}")
    _check_inner("matmul", a, b)
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    return Aval(tuple(batch) + (a.shape[-2], b.shape[-1]), a.dtype, a.device)


def _mT(x):
    """`x` with its last two dims swapped (callers pass 2-D or more): PERMUTE bound
    directly, as transpose(x, -2, -1) would bind it. matmul's VJP calls this once or twice
    per product; transpose()'s argument normalization cost as much as the op (~5 us)."""
    n = x.ndim
    dims = _MT_DIMS.get(n)
    if dims is None:
        dims = _MT_DIMS[n] = tuple(range(n - 2)) + (n - 1, n - 2)
    return bind(_shape.PERMUTE, x, dims=dims)


_MT_DIMS: dict = {}


def _blas_matmul(a, b):
    return _coreshare.matmul(a, b, blas_only=True)


def _matmul_impl(xp, a, b):
    # numpy: on the BLAS threads the machine can give now, as compiled plans call it
    # (coreshare.matmul). With another process on one of 2 cores, a 2-thread GEMM waits
    # for the thread stuck behind it: the eager LSTM LM step took 5-14 s on 2 BLAS
    # threads against 1.3 s on one, in the same process.
    mm = _blas_matmul if xp is _np else xp.matmul
    if a.ndim > 2 and b.ndim == 2:
        return matmul_rows(mm, a, b)
    return mm(a, b)


def matmul_rows(mm, a, b):
    """``a @ b`` for an N-d `a` and a 2-D `b` as one GEMM over a's flattened leading dims
    (``mm``: the 2-D product to call), shaped back. numpy's stacked matmul runs a small
    GEMM per leading index (3.6x slower for a (128, 16, 256) activation times a 256x256
    weight). The eager impl and compiled plans (compiler/plan.py) both call this. A
    non-contiguous `a` is copied once by the reshape (numpy's stacked loop would have
    copied or run its non-BLAS loop per slice)."""
    lead = a.shape[:-1]
    m = 1
    for d in lead:
        m *= d
    return mm(a.reshape(m, a.shape[-1]), b).reshape(lead + (b.shape[-1],))


def _matmul_vjp(g, out, a, b):
    # b arrives as a shape-only stand-in when only b needs a gradient (its rank decides
    # gb's form below): then a needs none, and g @ b.T would be computed and thrown away.
    ga = _mm(g, _mT(b)) if b is not None and not shape_only(b) else None
    if a is None:
        gb = None
    elif a.ndim > 2 and b.ndim == 2:
        # (..., k) @ (k, n): the weight's gradient is one GEMM over the flattened leading
        # dims, (k, M) @ (M, n), not a stacked matmul per leading index summed afterwards
        # (a (128, 16, 256) activation: 14 ms of matmuls + 7 ms of sum -> 1 ms).
        gb = _mm(_mT(reshape(a, (-1, a.shape[-1]))), reshape(g, (-1, g.shape[-1])))
    elif a.ndim == 2 and column_major(b):
        # b is a transposed weight (``x @ w.T``, linear): (g.T @ a).T is its gradient
        # with w's gradient row-major, so w's leaf takes it without a copy (PyTorch's
        # mm_mat2_backward picks the layout from mat2's strides the same way).
        gb = _mT(_mm(_mT(g), a))
    else:
        gb = _mm(_mT(a), g)
    return ga, gb


def _matmul_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): `_matmul_impl`'s choice for
    these shapes, made once. A product below coreshare's TINY_GEMM_MNK is numpy's matmul
    itself (coreshare.matmul leaves BLAS's threads alone for it): the small products of
    an eager step skip two Python frames."""
    sa, sb = shapes
    if len(sa) > 2 and len(sb) == 2:
        return None   # matmul_rows: one GEMM over the flattened leading dims
    if sa[-2] * sa[-1] * sb[-1] < _coreshare.TINY_GEMM_MNK:
        return _np.matmul
    return _blas_matmul


MATMUL = defprim("matmul", _matmul_impl, _matmul_rule, _matmul_vjp,
                 kind="matmul", save=lambda rq: tuple(i for i in (0, 1) if rq[1 - i]),  # the other operand
                 extra={"meta": lambda rq: (1,) if rq[1] else (),  # b's rank, for its gradient
                        "fast": _matmul_fast})
# The VJP's products are of 2-D-or-more operands by construction: MATMUL's fast path
# itself (matmul()'s rank dispatch is for user calls), no frame of its own.
_mm = MATMUL.binary


def matmul(a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if a.ndim >= 2 and b.ndim >= 2:
        return MATMUL.binary(a, b)  # (= bind(MATMUL, a, b), one call less)
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if not (k_a == k_b):
        raise ShapeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
                         f"({k_a} != {k_b})")
    a2 = unsqueeze(a, 0) if a.ndim == 1 else a
    b2 = unsqueeze(b, -1) if b.ndim == 1 else b
    out = bind(MATMUL, a2, b2)
    shape = tuple(out.shape)
    if b.ndim == 1:
        shape = shape[:-1]
    if a.ndim == 1:
        shape = shape[:-2] + shape[-1:] if b.ndim != 1 else shape[:-1]
    return reshape(out, shape)


def _check_inner(op, a, b):
    if not (a.shape[-1] == b.shape[-2]):
        raise ShapeError(f"{op}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
                         f"({a.shape[-1]} != {b.shape[-2]})")
    if a.dtype is not b.dtype:
        raise DTypeError(f"{op}: expected both operands to have the same dtype, got "
                         f"{a.dtype.name} and {b.dtype.name}")


def _checked(op, check):
    """MATMUL's two-operand fast path (registry `_make_binary`) for `op`, whose own shape
    and dtype checks (`check`, with `op`'s error texts) run only for an operand signature
    without a dispatch plan. A plan exists only for (shapes, dtypes) that MATMUL's rule
    accepted, which is all `check` verifies past the rank test the caller makes: the
    check's ~1 µs (four Size objects) is not paid on every product."""
    def miss(a, b, key, params):
        check(op, a, b)
        return bind(MATMUL, a, b)
    return _make_binary(MATMUL, miss)


def _check_batch(op, a, b):
    if not (a.shape[0] == b.shape[0]):
        raise ShapeError(f"{op}: batch sizes differ: {tuple(a.shape)} and {tuple(b.shape)}")
    _check_inner(op, a, b)


_MM = _checked("mm", _check_inner)
_BMM = _checked("bmm", _check_batch)


def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expected 2-D tensors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return _MM(a, b)


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: expected 3-D tensors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return _BMM(a, b)


def mv(a, v):
    return matmul(a, v)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError("dot: expected 1-D tensors")
    return matmul(a, b)


def outer(a, b):
    return unsqueeze(a, 1) * unsqueeze(b, 0)


def linear(x, weight, bias=None):
    """y = x @ weight.T + bias, weight of shape (out_features, in_features) as in PyTorch."""
    if x.ndim == 0 or weight.ndim not in (1, 2) or not (x.shape[-1] == weight.shape[-1]):
        raise ShapeError(f"linear: input of shape {tuple(x.shape)} does not match weight of shape "
                         f"{tuple(weight.shape)} (expected input features {weight.shape[-1] if weight.ndim else '?'})")
    out = matmul(x, _mT(weight)) if weight.ndim == 2 else matmul(x, weight)
    if bias is not None:
        out = out + bias
    return out
