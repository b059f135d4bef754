"""Matrix multiplication (to BLAS through numpy/cupy) and its composites.

The records' numpy forms call the array module's matmul; the CPU backend registers its
GEMM route for them (ops/impls.py; compiler/cpu/gemm/products.py: BLAS threads by the
cores the process may use, hand kernels for shapes BLAS runs slowly).
"""
from __future__ import annotations

import math

import numpy as _np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor
from ..shapes import broadcast_shapes
from . import eager as _eager
from .registry import Aval, defprim
from .eager import _make_binary, bind
from . import shape as _shape
from .shape import reshape, unsqueeze
from ..autograd.node import column_major, shape_only
from . import autocast as _autocast
from .. import bf16 as _bf16
from .. import dtypes as _dt
from . import bf16_eager as _bf16_eager

__all__ = ["matmul", "mm", "bmm", "linear", "outer", "ger", "dot", "mv"]


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


def _matmul_impl(xp, a, b):
    if a.dtype == _bf16.STORAGE:      # bf16 words: float32 products, rounded once
        return _bf16.matmul_words(a, b)
    if a.ndim > 2 and b.ndim == 2:
        return matmul_rows(xp.matmul, a, b)
    if a.ndim == 2 and b.ndim > 2 and b.shape[-1] == 1:
        return matmul_cols(xp.matmul, a, b)
    return xp.matmul(a, b)


def matmul_rows(mm, a, b):
    """``a @ b`` for an N-d `a` and a 2-D `b` as one GEMM over a's flattened leading dims
    (``mm``: the 2-D product to call), shaped back: numpy's stacked matmul runs a small GEMM
    per leading index (3.6x slower for a (128, 16, 256) activation). The eager impl and
    compiled plans both call this."""
    lead = a.shape[:-1]
    return mm(a.reshape(math.prod(lead), a.shape[-1]), b).reshape(lead + (b.shape[-1],))


def matmul_cols(mm, a, b):
    """``a @ b`` for a 2-D `a` and a batch `b` of single columns, (..., k, 1): one GEMM of
    b's columns as rows by ``a.T`` (``mm``: the 2-D product to call), shaped back. numpy's
    stacked matmul runs a matrix-vector product per batch index ((3, 3) by (4096, 3, 1):
    ~4x slower), as PyTorch folds this product too."""
    lead = b.shape[:-2]
    return mm(b.reshape(math.prod(lead), b.shape[-2]), a.T).reshape(lead + (a.shape[0], 1))


def _rows(x):
    """`x` as one matrix over its flattened leading dims: (-1, k), or the leading dims'
    product where k is 0 (-1 cannot be inferred then: a layer of no output features)."""
    k = x.shape[-1]
    if not (isinstance(k, int) and k == 0):
        return reshape(x, (-1, k))
    return reshape(x, (math.prod(x.shape[:-1]), 0))


def _matmul_vjp(g, out, a, b):
    # b arrives as a shape-only stand-in when only b needs a gradient (its rank decides
    # gb's form below): then a needs none, and g @ b.T would be computed and thrown away.
    # a likewise when only a needs one: its rank and shape decide ga's form.
    stand_in = b is not None and shape_only(b)
    a_stand_in = a is not None and shape_only(a)
    if b is None or stand_in:
        ga = None
    elif a.ndim == 2 and b.ndim > 2 and _folds(a.shape[0], a.shape[1], b.shape[-1]):
        # a 2-D a broadcast over b's leading dims (``w @ x`` over a batch): its gradient
        # sums ``g @ b.T`` over them, taken as one GEMM over the folded dims, (m, L*n) @
        # (L*n, k), as PyTorch's folded matmul takes it, not a product per leading index
        # and the (L, m, k) products summed after (vmap's (4, 128) @ (64, 128, 1): ~4x)
        ga = _mm_tn(_rows(_mT(g)), _rows(_mT(b)))
    else:
        # (which side BLAS's M is, for a long inner dim or few rows, is the backend's
        # choice: compiler/cpu/gemm/products.py `rows_first`)
        ga = _mm_nt(g, b)
    if a is None or a_stand_in:
        gb = None
    elif a.ndim > 2 and b.ndim == 2:
        # (..., k) @ (k, n): the weight's gradient is one GEMM over the flattened leading
        # dims, (k, M) @ (M, n), not a stacked matmul per leading index summed afterwards
        # (a (128, 16, 256) activation: ~20x faster than the matmuls and their sum).
        gb = _mm_tn(_rows(a), _rows(g))
    elif a.ndim == 2 and column_major(b, stand_in):
        # b is a transposed weight (``x @ w.T``, linear): (g.T @ a).T is its gradient
        # with w's gradient row-major, so w's leaf takes it without a copy (PyTorch's
        # mm_mat2_backward picks the layout from mat2's strides the same way).
        gb = _mT(_mm_tn(g, a))
    else:
        gb = _mm_tn(a, g)
    return ga, gb


def _folds(m, k, n) -> bool:
    """Whether the gradient of a 2-D (m, k) operand broadcast over a batch of (k, n) ones
    folds the batch into one GEMM (`_matmul_vjp`): its operands, laid out as (L*n, m) and
    (L*n, k), are views for n == 1, else copies, which cost less than the (L, m, k)
    per-index products they replace where n * (m + k) <= m * k."""
    return all(isinstance(d, int) for d in (m, k, n)) and n * (m + k) <= m * k


def _matmul_fast(shapes, dtype, params):
    """The plan's numpy call (registry ``extra["fast"]``): numpy's matmul for 2-D operands
    (a backend's registered GEMM says its own: ops/impls.py `specialize`)."""
    sa, sb = shapes
    if len(sa) > 2 and len(sb) == 2:
        return None   # matmul_rows: one GEMM over the flattened leading dims
    if len(sa) == 2 and len(sb) > 2 and sb[-1] == 1:
        return None   # matmul_cols: one GEMM over the batch's columns
    return dense_matmul


MATMUL = defprim("matmul", _matmul_impl, _matmul_rule, _matmul_vjp,
                 kind="matmul", save=lambda rq: tuple(i for i in (0, 1) if rq[1 - i]),  # the other operand
                 # the shape of an operand whose values are not kept: its rank, for its gradient
                 extra={"meta": lambda rq: tuple(i for i in (0, 1) if rq[i]),
                        "fast": _matmul_fast})
# The VJP's products are of 2-D-or-more operands by construction: MATMUL's fast path
# itself (matmul()'s rank dispatch is for user calls), no frame of its own.
_mm = MATMUL.binary


# ---------------------------------------------------------------- transposed operands
# Products with an operand transposed: matmul's gradients ``g @ b.T`` and ``a.T @ g``.
# Bound as PERMUTE then MATMUL, each transpose cost a view op of its own. These records
# give BLAS the same transposed view (bitwise the permute + matmul pair's values). Traced
# code keeps that pair (see `_mm_nt`), the form the compiler's passes know.

def _swap(x):
    """`x` (an array) with its last two axes swapped: a view."""
    return x.T if x.ndim == 2 else x.swapaxes(-1, -2)


def _swapped(av):
    s = av.shape
    return Aval(s[:-2] + (s[-1], s[-2]), av.dtype, av.device)


def _nt_impl(xp, a, b):
    return _matmul_impl(xp, a, _swap(b))


def _tn_impl(xp, a, b):
    return _matmul_impl(xp, _swap(a), b)


def _nt_rule(a, b):
    if b.ndim < 2:
        raise ShapeError(f"matmul_nt: internal rank error {a.shape} @ {b.shape}.T")
    return _matmul_rule(a, _swapped(b))


def _tn_rule(a, b):
    if a.ndim < 2:
        raise ShapeError(f"matmul_tn: internal rank error {a.shape}.T @ {b.shape}")
    return _matmul_rule(_swapped(a), b)


def _nt_vjp(g, out, a, b):
    # out = a @ b.T: ga = g @ b, gb = g.T @ a; an N-d a with a 2-D b: gb as one product
    # over a's flattened leading dims, as `_matmul_vjp` takes it
    stand_in = b is not None and shape_only(b)
    if a is None:
        gb = None
    elif a.ndim > 2 and b is not None and b.ndim == 2:
        gb = _mm_tn(_rows(g), _rows(a))
    else:
        gb = _mm_tn(g, a)
    return (_mm(g, b) if b is not None and not stand_in else None, gb)


def _tn_vjp(g, out, a, b):
    # out = a.T @ b: ga = (g @ b.T).T = b @ g.T, gb = a @ g
    return (_mm_nt(b, g) if b is not None else None,
            _mm(a, g) if a is not None else None)


def dense_matmul(a, b):
    """numpy's matmul, a broadcast (zero-stride) operand copied first: numpy's matmul
    leaves BLAS for one (a 256 x 512 matrix by an expanded 512-vector, the gradient of a
    sum: ~18x the time)."""
    if 0 in a.strides:
        a = _np.ascontiguousarray(a)
    if 0 in b.strides:
        b = _np.ascontiguousarray(b)
    return _np.matmul(a, b)


def _nt_small(a, b):
    return dense_matmul(a, b.T)


def _tn_small(a, b):
    return dense_matmul(a.T, b)


def _transposed_fast(small):
    """The plan's numpy call of a transposed-operand record (``extra["fast"]``): `small`
    for 2-D operands, the impl for batches."""
    def fast(shapes, dtype, params):
        sa, sb = shapes
        return small if len(sa) == 2 and len(sb) == 2 else None
    return fast


_SAVE_OTHER = MATMUL.save   # each operand's gradient reads the other operand
MATMUL_NT = defprim("matmul_nt", _nt_impl, _nt_rule, _nt_vjp, kind="matmul", save=_SAVE_OTHER,
                    grad_name="MmBackward0",
                    extra={"fast": _transposed_fast(_nt_small), "meta": lambda rq: (1,) if rq[1] else ()})
MATMUL_TN = defprim("matmul_tn", _tn_impl, _tn_rule, _tn_vjp, kind="matmul", save=_SAVE_OTHER,
                    grad_name="MmBackward0",
                    extra={"fast": _transposed_fast(_tn_small)})
_nt = MATMUL_NT.binary
_tn = MATMUL_TN.binary
# Every product an eager program runs is one of these records' (tests count GEMMs so).
PRODUCTS = (MATMUL, MATMUL_NT, MATMUL_TN)


def _mm_nt(a, b):
    """``a @ b.T`` (b's last two dims swapped) for matmul's gradients: one record in eager
    code; the PERMUTE + MATMUL pair under a tracer (the form compiler passes match)."""
    if _eager._tracers_active:
        return _mm(a, _mT(b))
    return _nt(a, b)


def _mm_tn(a, b):
    """``a.T @ b`` for matmul's gradients (see `_mm_nt`)."""
    if _eager._tracers_active:
        return _mm(_mT(a), b)
    return _tn(a, b)


@_autocast.lower_widened
def matmul(a, b):
    if getattr(a, "is_sparse", False) or getattr(b, "is_sparse", False):
        from ..sparse import mm as _sparse_mm
        return _sparse_mm(a, b)
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
    """MATMUL's two-operand fast path for `op`; its shape and dtype checks (`check`) run
    only for a signature without a dispatch plan, since a plan exists only for signatures
    MATMUL's rule accepted (saves ~1 µs a product)."""
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


@_autocast.lower_widened
def mm(a, b):
    if getattr(a, "is_sparse", False) or getattr(b, "is_sparse", False):   # tracejit/sparse.py
        from ..sparse import mm as _sparse_mm
        return _sparse_mm(a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expected 2-D tensors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if _eager.trace_state.tracer is not None:   # (a capture records MATMUL past the plans' checks)
        _check_inner("mm", a, b)
    return _MM(a, b)


@_autocast.lower_widened
def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"bmm: expected 3-D tensors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if _eager.trace_state.tracer is not None:   # (a capture records MATMUL past the plans' checks)
        _check_batch("bmm", a, b)
    return _BMM(a, b)


@_autocast.unlisted
def mv(a, v):
    return matmul(a, v)


@_autocast.unlisted
def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError("dot: expected 1-D tensors")
    return matmul(a, b)


def outer(a, b):
    return unsqueeze(a, 1) * unsqueeze(b, 0)


ger = outer   # PyTorch's deprecated spelling, still common in positional encodings


@_autocast.lower_widened
def linear(x, weight, bias=None):
    """y = x @ weight.T + bias, weight of shape (out_features, in_features) as in PyTorch."""
    xd, wd = getattr(x, "_data", None), getattr(weight, "_data", None)
    # (eager CPU operands: numpy's shapes, not a Size and its Python indexing per check)
    xs, ws = (xd.shape, wd.shape) if type(xd) is _np.ndarray and type(wd) is _np.ndarray else (x.shape, weight.shape)
    xn, wn = len(xs), len(ws)
    if xn == 0 or wn not in (1, 2) or not (xs[-1] == ws[-1]):
        raise ShapeError(f"linear: input of shape {tuple(xs)} does not match weight of shape "
                         f"{tuple(ws)} (expected input features {ws[-1] if wn else '?'})")
    if x.dtype is not weight.dtype:
        raise DTypeError(f"linear: input is {x.dtype.name} but weight is {weight.dtype.name}; they must "
                         f"share one dtype (convert the input, e.g. input.to({weight.dtype.name}), or "
                         f"the layer, e.g. .to({x.dtype.name}))")
    if x.dtype is _BF16:
        wide = _bf16_eager.widened(x, weight, bias)
        if wide is not None:    # (computed in float32, rounded once)
            return bind(_CAST, linear(*wide), dtype=_BF16)
    if (wn == 2 and xn >= 2 and not _eager._tracers_active
            and isinstance(x, Tensor) and isinstance(weight, Tensor)):   # (not sparse)
        # one record, ``x @ weight.T`` with the weight as it is: no transposed view and no
        # node of its own, and the weight's gradient ``g.T @ x`` comes out row-major
        # (traced code keeps permute + matmul, the form the compiler's passes match)
        out = _nt(x, weight)
    else:
        out = matmul(x, _mT(weight)) if wn == 2 else matmul(x, weight)
    if bias is not None:
        out = out + bias
    return out


def grouped_mm(mat_a, mat_b, *, offs=None, bias=None, out_dtype=None):
    """``F.grouped_mm``, the per-expert products of Mixture-of-Experts layers: a 2-D operand's
    jagged dim is cut at `offs` (the int32 ends of the groups), a 3-D one's first dim counts
    the groups. Made of slices and products, so gradients flow as through them."""
    from .shape import cat, stack
    a, b = mat_a, mat_b
    if bias is not None:
        raise NotImplementedError("grouped_mm: bias is not supported (nor in PyTorch); add it to the result")
    if out_dtype is not None and _dt.as_dtype(out_dtype) is not a.dtype:
        raise DTypeError(f"grouped_mm: out_dtype must match mat_a's dtype {a.dtype.name}, got {out_dtype}")
    if a.ndim not in (2, 3) or b.ndim not in (2, 3) or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"grouped_mm: expected 2-D or 3-D operands whose contraction dims match, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if (offs is None) != (a.ndim == 3 and b.ndim == 3):
        raise ArgumentError("grouped_mm: give offs exactly when an operand is 2-D")
    if offs is None:
        return matmul(a, b)
    if offs.dtype is not _dt.int32 or offs.ndim != 1:
        raise DTypeError(f"grouped_mm: offs must be a 1-D int32 tensor, got {offs.dtype.name} of shape "
                         f"{tuple(offs.shape)}")
    ends = [int(e) for e in offs.tolist()]
    cuts = list(zip([0] + ends[:-1], ends))
    if a.ndim == 2 and b.ndim == 2:       # the contraction dim cut: one (m, n) product a group
        return stack([a[:, s:e] @ b[s:e] for s, e in cuts])
    groups, dim, size = (b.shape[0], 0, a.shape[0]) if a.ndim == 2 else (a.shape[0], 1, b.shape[1])
    if len(ends) != groups:
        raise ShapeError(f"grouped_mm: {len(ends)} offsets for {groups} groups")
    parts = [a[s:e] @ b[g] if dim == 0 else a[g] @ b[:, s:e] for g, (s, e) in enumerate(cuts)]
    if size > ends[-1]:   # (past the last group: zeros, as PyTorch's)
        from .creation import zeros
        rest = (size - ends[-1], b.shape[-1]) if dim == 0 else (a.shape[1], size - ends[-1])
        parts.append(zeros(*rest, dtype=a.dtype, device=a.device))
    return cat(parts, dim)


_BF16 = _dt.bfloat16
from .elementwise_logic import CAST as _CAST  # noqa: E402
