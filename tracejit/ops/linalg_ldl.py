"""The LDL^T factorization of symmetric (indefinite) matrices with Bunch-Kaufman pivoting,
packed as LAPACK's sytrf packs it (``linalg.ldl_factor``), and the solve with it
(``linalg.ldl_solve``).

- ``LDL_FACTOR``: a primitive (numpy, float64, batched over the leading dims) reading the
  lower triangle. Its records: LD (L's multipliers below the diagonal, D's 1 x 1 and
  2 x 2 blocks on the diagonal and subdiagonal), LAPACK's 1-based int32 pivots (negative,
  twice, for a 2 x 2 block) and info (the 1-based column of the first zero pivot). As in
  PyTorch it has no derivative.
- ``ldl_solve``: a composite: the permutation and block structure are read from the
  pivots (data, not differentiable), then A = Q L' D L'^T Q^T is rebuilt from LD with
  gathers and products and A X = B solved, so X carries gradients to B and to LD.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from .registry import Aval, bind, defprim

__all__ = ["ldl_factor_parts", "ldl_solve"]

_ALPHA = (1 + math.sqrt(17)) / 8     # Bunch-Kaufman's threshold: bounds the growth of D


def _sytf2_lower(a: np.ndarray):
    """(LD, pivots, info) of one symmetric matrix (lower triangle read), in place on a copy."""
    a = np.tril(np.array(a, dtype=np.float64, copy=True))
    n = a.shape[0]
    piv = np.zeros(n, np.int32)
    info = 0
    k = 0
    while k < n:
        kstep, kp = 1, k
        absakk = abs(a[k, k])
        if k + 1 < n:
            imax = k + 1 + int(np.argmax(np.abs(a[k + 1:, k])))
            colmax = abs(a[imax, k])
        else:
            imax, colmax = k, 0.0
        zero = max(absakk, colmax) == 0 or math.isnan(absakk)
        if zero:            # a zero (or NaN) column: noted in info, nothing eliminated
            info = info or k + 1
        elif absakk < _ALPHA * colmax:
            # the largest off-diagonal of row imax (its row left of the diagonal, column below)
            rowmax = np.max(np.abs(a[imax, k:imax]))
            if imax + 1 < n:
                rowmax = max(rowmax, np.max(np.abs(a[imax + 1:, imax])))
            if absakk >= _ALPHA * colmax * (colmax / rowmax):
                kp = k
            elif abs(a[imax, imax]) >= _ALPHA * rowmax:
                kp = imax
            else:
                kp, kstep = imax, 2
            kk = k + kstep - 1
            if kp != kk:            # swap rows and columns kk and kp of the trailing lower triangle
                a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
                mid = a[kk + 1:kp, kk].copy()
                a[kk + 1:kp, kk] = a[kp, kk + 1:kp]
                a[kp, kk + 1:kp] = mid
                a[kk, kk], a[kp, kp] = a[kp, kp], a[kk, kk]
                if kstep == 2:
                    a[k + 1, k], a[kp, k] = a[kp, k], a[k + 1, k]
        if zero:
            pass
        elif kstep == 1:
            if k + 1 < n:       # LAPACK's order of operations: A -= x (x / akk)^T, then x /= akk
                d11 = 1 / a[k, k]
                a[k + 1:, k + 1:] += np.tril(np.outer(a[k + 1:, k], -d11 * a[k + 1:, k]))
                a[k + 1:, k] *= d11
        elif k + 2 < n:
            d21 = a[k + 1, k]
            d11, d22 = a[k + 1, k + 1] / d21, a[k, k] / d21
            t = 1 / (d11 * d22 - 1)
            d21 = t / d21
            wk = d21 * (d11 * a[k + 2:, k] - a[k + 2:, k + 1])
            wkp1 = d21 * (d22 * a[k + 2:, k + 1] - a[k + 2:, k])
            a[k + 2:, k + 2:] = np.tril(a[k + 2:, k + 2:] - np.outer(a[k + 2:, k], wk)
                                        - np.outer(a[k + 2:, k + 1], wkp1))
            a[k + 2:, k], a[k + 2:, k + 1] = wk, wkp1
        if kstep == 1:
            piv[k] = kp + 1
        else:
            piv[k] = piv[k + 1] = -(kp + 1)
        k += kstep
    return a, piv, info


def _ldl_np(a: np.ndarray):
    n = a.shape[-1]
    flat = np.asarray(a, np.float64).reshape(-1, n, n)
    ld, piv, info = np.zeros_like(flat), np.zeros((flat.shape[0], n), np.int32), np.zeros(flat.shape[0], np.int32)
    for i, m in enumerate(flat):
        ld[i], piv[i], info[i] = _sytf2_lower(m)
    lead = tuple(a.shape[:-2])
    return ld.reshape(lead + (n, n)), piv.reshape(lead + (n,)), info.reshape(lead)


def _check_square(op, a):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: A must be batches of square matrices, but they are "
                         f"{a.shape[-2] if a.ndim >= 2 else 1} by {a.shape[-1] if a.ndim else 1} matrices")
    if not a.dtype.is_floating_point:
        raise TypeError(f"{op}: expected a floating point A, got {a.dtype.name}"
                        + (" (complex matrices are not supported)" if a.dtype.is_complex else ""))


def _ldl_rule(a, part):
    _check_square("linalg.ldl_factor", a)
    if part == "LD":
        return Aval(a.shape, a.dtype, a.device)
    return Aval(a.shape[:-1] if part == "pivots" else a.shape[:-2], _dt.int32, a.device)


def _ldl_impl(xp, a, part):
    ld, piv, info = _ldl_np(np.asarray(a))
    return {"LD": ld.astype(np.asarray(a).dtype), "pivots": piv, "info": info}[part]


def _ldl_vjp(g, out, a, part):
    raise NotImplementedError("the derivative of linalg.ldl_factor is not implemented (as in PyTorch); "
                              "detach() A, or differentiate a solve with A instead")


LDL_FACTOR = defprim("linalg_ldl_factor", _ldl_impl, _ldl_rule, _ldl_vjp, kind="other", save=lambda rq: (),
                     host=True)


def ldl_factor_parts(A):
    """(LD, pivots, info) of the symmetric matrices `A` (their lower triangles)."""
    return tuple(bind(LDL_FACTOR, A, part=p) for p in ("LD", "pivots", "info"))


# ---------------------------------------------------------------- solve
def _structure(piv: np.ndarray):
    """From LAPACK pivots (..., n): the gather rows (..., n, n) that put each column of L
    in the final row order, the mask of L's entries, the mask of D's subdiagonal and the
    final order p (A[p][:, p] = L' D L'^T)."""
    lead, n = piv.shape[:-1], piv.shape[-1]
    flat = piv.reshape(-1, n).astype(np.int64)
    rows = np.zeros((flat.shape[0], n, n), np.int64)
    lmask = np.zeros((flat.shape[0], n, n), bool)
    sub = np.zeros((flat.shape[0], n, n), bool)
    order = np.zeros((flat.shape[0], n), np.int64)
    for b, pv in enumerate(flat):
        steps, k = [], 0
        while k < n:
            kstep = 1 if pv[k] > 0 else 2
            steps.append((k, kstep, abs(int(pv[k])) - 1))
            k += kstep
        later = np.arange(n)            # final row -> row at the time of the step
        for k, kstep, kp in reversed(steps):
            kk = k + kstep - 1
            for j in range(k, k + kstep):
                rows[b, :, j] = later
                lmask[b, kk + 1:, j] = True
            if kstep == 2:
                sub[b, k + 1, k] = True
            swap = later.copy()
            swap[later == kk], swap[later == kp] = kp, kk
            later = swap
        p = np.arange(n)
        for k, kstep, kp in steps:
            kk = k + kstep - 1
            p[kk], p[kp] = p[kp], p[kk]
        order[b] = p
    shape = lead + (n, n)
    return rows.reshape(shape), lmask.reshape(shape), sub.reshape(shape), order.reshape(lead + (n,))


def _rebuild(LD, pivots):
    """A = Q L' D L'^T Q^T from the packed factor (differentiable in LD)."""
    from .creation import tensor
    from .gather_prim import gather
    from .rearrange import diag_embed, diagonal
    from .shape import transpose
    from .tensorfns import tril
    piv = np.asarray(pivots.detach().numpy())
    rows, lmask, sub, order = _structure(piv)
    n = LD.shape[-1]
    lead = tuple(np.broadcast_shapes(tuple(LD.shape[:-2]), piv.shape[:-1]))
    ld = tril(LD).expand(lead + (n, n))
    eye = np.broadcast_to(np.eye(n), lead + (n, n))
    const = lambda x: tensor(np.ascontiguousarray(np.broadcast_to(x, lead + x.shape[-2:])).astype(LD.dtype.np),  # noqa: E731
                             device=LD.device)
    idx = tensor(np.ascontiguousarray(np.broadcast_to(rows, lead + (n, n))), device=LD.device)
    lower = gather(ld, -2, idx) * const(lmask) + const(eye)
    off = ld * const(sub)
    d = diag_embed(diagonal(ld, 0, -2, -1)) + off + transpose(off, -1, -2)
    m = lower @ d @ transpose(lower, -1, -2)
    inv = np.argsort(np.broadcast_to(order, lead + (n,)), axis=-1)
    q = np.zeros(lead + (n, n))
    np.put_along_axis(q, inv[..., None], 1.0, axis=-1)   # q[i, inv[i]] = 1: (Q M Q^T)[i, j] = M[inv i, inv j]
    qt = const(q)
    return qt @ m @ transpose(qt, -1, -2)


def ldl_solve(LD, pivots, B):
    """X with A X = B for the A that `ldl_factor` packed as (LD, pivots)."""
    from .linalg_dense import solve
    _check_square("linalg.ldl_solve", LD)
    if pivots.dtype.is_floating_point or pivots.dtype.is_complex or tuple(pivots.shape) != tuple(LD.shape[:-1]):
        raise ShapeError(f"linalg.ldl_solve: expected integer pivots of shape {tuple(LD.shape[:-1])}, got "
                         f"{pivots.dtype.name} of shape {tuple(pivots.shape)}")
    if B.ndim < 2:
        raise ShapeError(f"linalg.ldl_solve: B must be a batch of matrices (..., n, k), got shape {tuple(B.shape)}")
    if B.shape[-2] != LD.shape[-1]:
        raise ShapeError(f"linalg.ldl_solve: incompatible matrix sizes: each A matrix is {LD.shape[-1]} by "
                         f"{LD.shape[-1]} but each B matrix is {B.shape[-2]} by {B.shape[-1]}")
    if B.dtype is not LD.dtype:
        raise TypeError(f"linalg.ldl_solve: LD ({LD.dtype.name}) and B ({B.dtype.name}) must have the same dtype")
    a = _rebuild(LD, pivots)
    from ..shapes import broadcast_shapes
    batch = tuple(broadcast_shapes("linalg.ldl_solve", tuple(a.shape[:-2]), tuple(B.shape[:-2])))
    return solve(a.expand(batch + tuple(a.shape[-2:])), B.expand(batch + tuple(B.shape[-2:])))
