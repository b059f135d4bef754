"""LU factorization, the matrix exponential and the general eigensolver, as primitives
(numpy in float64), with the triangular and LU solvers as composites of linalg_dense's
``solve``.

- ``LU_FACTOR``: partial-pivoting LU (Doolittle, batched over the leading dims) packed
  as LAPACK's getrf packs it, with its 1-based int32 pivots as a second record. Its
  gradient (square matrices) is PyTorch's: P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T.
- ``MATRIX_EXP``: scaling and squaring of the [13/13] Padé approximant; its gradient is
  the upper-right block of exp([[A^T, G], [0, A^T]]) (the matrix function's Fréchet
  derivative at A^T applied to G), so every order follows.
- ``EIG``: numpy's eig, complex eigenvalues and eigenvectors (eigenvectors of unit norm,
  as LAPACK's geev gives them and PyTorch returns them); first-order gradients by
  PyTorch's formula (a numpy record, so no second order).
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from .linalg import _mT
from .linalg_dense import _square
from .registry import Aval, bind, defprim

__all__ = ["lu_factor_parts", "matrix_exp", "eig_parts", "solve_triangular", "perm_matrix", "pivots_to_perm", "eye_of"]


def eye_of(shape, dtype, device):
    """Ones on the diagonal of the last two dims of `shape`: triu(tril(ones)), bound as
    ops (not a constant) so a traced backward pass can recompute it."""
    from .creation import ones
    from .tensorfns import tril, triu
    return triu(tril(ones(tuple(shape), dtype=dtype, device=device)))


# ---------------------------------------------------------------- LU with partial pivoting
def _lu_np(a: np.ndarray):
    """(packed LU, 1-based pivots) of each matrix in the batch `a` (..., m, n)."""
    cplx = np.asarray(a).dtype.kind == "c"
    lu = np.array(a, dtype=np.complex128 if cplx else np.float64, copy=True)
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    piv = np.zeros(lu.shape[:-2] + (k,), np.int32)
    flat = lu.reshape(math.prod(lu.shape[:-2]), m, n)   # (not -1: an empty matrix's batch is known)
    fpiv = piv.reshape(flat.shape[0], k)
    rows = np.arange(flat.shape[0])
    for j in range(k):
        col = flat[:, j:, j]   # (LAPACK's pivot of a complex column: the largest |re| + |im|)
        p = j + np.argmax(np.abs(col.real) + np.abs(col.imag) if cplx else np.abs(col), axis=1)
        fpiv[:, j] = p + 1
        top = flat[rows, j].copy()
        flat[rows, j] = flat[rows, p]
        flat[rows, p] = top
        d = flat[:, j, j]
        with np.errstate(divide="ignore", invalid="ignore"):
            col = np.where(d[:, None] != 0, flat[:, j + 1:, j] / np.where(d == 0, 1.0, d)[:, None], 0.0)
        flat[:, j + 1:, j] = col
        flat[:, j + 1:, j + 1:] -= col[:, :, None] * flat[:, j, None, j + 1:]
    return flat.reshape(lu.shape), piv


def _lu_rule(a, part):
    if a.ndim < 2:
        raise ShapeError(f"linalg.lu_factor: expected a batch of matrices, got shape {a.shape}")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise TypeError(f"linalg.lu_factor: expected a floating point or complex input, got "
                        f"{a.dtype.name}")
    if part == "LU":
        return Aval(a.shape, a.dtype, a.device)
    return Aval(a.shape[:-2] + (min(a.shape[-2], a.shape[-1]),), _dt.int32, a.device)


def _lu_impl(xp, a, part):
    lu, piv = _lu_np(np.asarray(a))
    return lu.astype(np.asarray(a).dtype) if part == "LU" else piv


def perm_matrix(piv: np.ndarray, m: int, dtype) -> np.ndarray:
    """P (..., m, m) with A = P L U for LAPACK's 1-based row interchanges `piv`."""
    lead = piv.shape[:-1]
    perm = np.broadcast_to(np.arange(m), lead + (m,)).copy().reshape(math.prod(lead), m)
    fp = piv.reshape(perm.shape[0], piv.shape[-1]) - 1
    rows = np.arange(perm.shape[0])
    for j in range(fp.shape[1]):
        p = fp[:, j]
        a, b = perm[rows, j].copy(), perm[rows, p].copy()
        perm[rows, j], perm[rows, p] = b, a
    out = np.zeros((perm.shape[0], m, m), dtype)
    out[rows[:, None], perm, np.arange(m)[None, :]] = 1
    return out.reshape(lead + (m, m))


PIVOTS_TO_PERM = defprim("lu_pivots_to_perm",
                         lambda xp, piv, m, dtype: perm_matrix(np.asarray(piv).astype(np.int64), m, dtype.np),
                         lambda piv, m, dtype: Aval(piv.shape[:-1] + (m, m), dtype, piv.device),
                         None, kind="other", save=lambda rq: (), host=True)


def pivots_to_perm(pivots, m: int, dtype):
    """The permutation matrix P (A = P L U) of LAPACK-style pivots, as a tensor of `dtype`."""
    return bind(PIVOTS_TO_PERM, pivots, m=int(m), dtype=dtype)


def _lu_vjp(g, out, a, part):
    from .linalg_dense import _mH, solve
    from .tensorfns import tril, triu
    m, n = a.shape[-2], a.shape[-1]
    if m != n:
        raise NotImplementedError("linalg.lu_factor: gradients are supported for square matrices only")
    p = pivots_to_perm(bind(LU_FACTOR, a, part="pivots"), m, a.dtype)
    lo = tril(out, -1) + eye_of(out.shape, out.dtype, out.device)
    up = triu(out)
    phi = tril(_mH(lo) @ tril(g, -1), -1) + triu(triu(g) @ _mH(up))
    x = solve(_mH(lo), phi)                      # L^-H phi
    return (p @ _mH(solve(up, _mH(x))),)         # ... U^-H, then P


LU_FACTOR = defprim("linalg_lu_factor", _lu_impl, _lu_rule, _lu_vjp, kind="other",
                    save=lambda rq: (0,), save_out=True, host=True)


def lu_factor_parts(A):
    """(LU, pivots) of `A`."""
    return bind(LU_FACTOR, A, part="LU"), bind(LU_FACTOR, A, part="pivots")


# ---------------------------------------------------------------- triangular solve
def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False):
    """X with A X = B (X A = B when not left), A's other triangle ignored."""
    from .linalg_dense import solve
    from .tensorfns import tril, triu
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.solve_triangular: A must be a batch of square matrices, got shape {tuple(A.shape)}")
    if B.ndim < 2:
        raise ShapeError(f"linalg.solve_triangular: B must be a batch of matrices, got shape {tuple(B.shape)}")
    if upper is None or not isinstance(upper, bool):
        raise TypeError(f"linalg.solve_triangular: upper must be a bool (a keyword argument), got {upper!r}")
    if unitriangular:
        t = (triu(A, 1) if upper else tril(A, -1)) + eye_of(A.shape, A.dtype, A.device)
    else:
        t = triu(A) if upper else tril(A)
    return solve(t, B, left=left)


# ---------------------------------------------------------------- matrix exponential
_THETA13 = 5.371920351148152   # the 1-norm up to which [13/13] Padé is accurate to float64
_PADE13 = [math.factorial(26 - k) * math.factorial(13) / (math.factorial(26) * math.factorial(k)
                                                        * math.factorial(13 - k)) for k in range(14)]


def _expm_np(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    n = a.shape[-1]
    norm = np.abs(a).sum(-2).max(-1) if n else np.zeros(a.shape[:-2])
    with np.errstate(divide="ignore"):
        s = np.maximum(0, np.ceil(np.log2(np.maximum(norm, 1e-300) / _THETA13))).astype(np.int64)
    a = a / (2.0 ** s)[..., None, None]
    eye = np.broadcast_to(np.eye(n), a.shape)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    c = _PADE13
    u = a @ (a6 @ (c[13] * a6 + c[11] * a4 + c[9] * a2) + c[7] * a6 + c[5] * a4 + c[3] * a2 + c[1] * eye)
    v = a6 @ (c[12] * a6 + c[10] * a4 + c[8] * a2) + c[6] * a6 + c[4] * a4 + c[2] * a2 + c[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for i in range(int(s.max()) if s.size else 0):
        r = np.where((s > i)[..., None, None], r @ r, r)
    return r


def _expm_vjp(g, out, a):
    from .shape import cat
    from .creation import zeros
    n = a.shape[-1]
    at = _mT(a)
    z = zeros(tuple(a.shape), dtype=a.dtype, device=a.device)
    block = cat([cat([at, g], -1), cat([z, at], -1)], -2)
    return (bind(MATRIX_EXP, block)[..., :n, n:],)


MATRIX_EXP = defprim("linalg_matrix_exp", lambda xp, a: _expm_np(a).astype(np.asarray(a).dtype),
                     _square("linalg.matrix_exp"), _expm_vjp, kind="other", save=lambda rq: (0,),
                     host=True)


def matrix_exp(A):
    """exp(A) = sum_k A^k / k! of each square matrix."""
    return bind(MATRIX_EXP, A)


# ---------------------------------------------------------------- general eigensolver
def _eig_rule(a, part):
    _square("linalg.eig")(a)
    shape = a.shape[:-1] if part == "values" else a.shape
    return Aval(shape, a.dtype.to_complex(), a.device)


def _eig_impl(xp, a, part):
    w, v = np.linalg.eig(np.asarray(a))
    return (w if part == "values" else v).astype(np.result_type(np.asarray(a).dtype, np.complex64))


def _eig_grad_np(a, g, part):
    """PyTorch's linalg_eig_backward, the cotangent `g` of one part: gA = V^-H (diag(gL) +
    (V^H gV - V^H V diag(re(V^H gV))) / conj(E)) V^H, E_ij = L_j - L_i (its real part for a
    real A)."""
    a = np.asarray(a)
    w, v = np.linalg.eig(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64))
    g = np.asarray(g, np.complex128)
    vh = np.conj(np.swapaxes(v, -1, -2))
    if part == "values":
        inner = g[..., None, :] * np.eye(w.shape[-1])
    else:
        vhgv = vh @ g
        re = np.real(np.diagonal(vhgv, axis1=-2, axis2=-1))
        vhgv = vhgv - vh @ (v * re[..., None, :])
        e = w[..., None, :] - w[..., :, None]
        n = w.shape[-1]
        e[..., np.arange(n), np.arange(n)] = 1
        inner = vhgv / np.conj(e)
    ga = np.linalg.solve(vh, inner @ vh)
    return ga if a.dtype.kind == "c" else np.real(ga)


EIG_GRAD = defprim("linalg_eig_backward",
                   lambda xp, a, g, part: _eig_grad_np(a, g, part).astype(np.asarray(a).dtype),
                   lambda a, g, part: Aval(a.shape, a.dtype, a.device), None, kind="complex",
                   save=lambda rq: (), host=True)


EIG = defprim("linalg_eig", _eig_impl, _eig_rule,
              lambda g, out, a, part: (bind(EIG_GRAD, a, g, part=part),),
              kind="complex", save=lambda rq: (0,), host=True)


def eig_parts(A, values_only: bool = False):
    w = bind(EIG, A, part="values")
    return w if values_only else (w, bind(EIG, A, part="vectors"))
