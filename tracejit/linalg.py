"""``tracejit.linalg``: ``torch.linalg``'s functions on real tensors.

The decompositions and solvers are primitives in tracejit/ops/linalg_dense.py (LAPACK via
numpy, PyTorch's gradients where it documents them); norms, powers, products and the
``*_ex`` variants are composites of those and of the core ops. LU, the matrix exponential
and the general eigensolver (complex results) are in
tracejit/ops/linalg_factor.py; the triangular, LU and Cholesky solvers are composites of
``solve``, so their gradients are its own.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from . import dtypes as _dt
from .errors import LinAlgError, ShapeError
from .typeinfo import finfo
from .ops.creation import eye, tensor, zeros
from .ops.complex_ops import conj
from .ops.elementwise import abs as _abs
from .ops.linalg import matmul
from .ops.linalg_dense import cholesky, det, eigh, inv, pinv, qr, slogdet, solve, svd, svdvals
from .ops.linalg_factor import eig_parts, lu_factor_parts, eye_of, matrix_exp, pivots_to_perm, solve_triangular
from .ops.linalg_ldl import ldl_factor_parts, ldl_solve as _ldl_solve
from .ops.products import linalg_cross as cross
from .ops.rearrange import diagonal as _diagonal
from .ops.reductions import amax, amin, norm as _norm, sum as _sum
from .ops import autocast as _autocast

__all__ = ["norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "inv_ex", "solve", "solve_ex",
           "cholesky", "cholesky_ex", "eigh", "eigvalsh", "qr", "svd", "svdvals", "pinv",
           "matrix_power", "matrix_rank", "multi_dot", "vecdot", "cross", "diagonal", "matmul",
           "cond", "lstsq", "vander", "tensorinv", "tensorsolve", "eig", "eigvals", "matrix_exp",
           "solve_triangular", "lu", "lu_factor", "lu_factor_ex", "lu_solve", "householder_product",
           "ldl_factor", "ldl_factor_ex", "ldl_solve", "LinAlgError"]

_Ex = namedtuple("solve_ex", ["result", "info"])
_InvEx = namedtuple("inv_ex", ["inverse", "info"])
_CholeskyEx = namedtuple("cholesky_ex", ["L", "info"])
_Lstsq = namedtuple("lstsq", ["solution", "residuals", "rank", "singular_values"])
_Eig = namedtuple("eig", ["eigenvalues", "eigenvectors"])
_LU = namedtuple("lu", ["P", "L", "U"])
_LUFactor = namedtuple("lu_factor", ["LU", "pivots"])
_LUFactorEx = namedtuple("lu_factor_ex", ["LU", "pivots", "info"])
_LDLFactor = namedtuple("ldl_factor", ["LD", "pivots"])
_LDLFactorEx = namedtuple("ldl_factor_ex", ["LD", "pivots", "info"])
_TriSolve = namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    if dtype is not None:
        x = x.to(dtype)
    return _norm(x, ord, dim, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    if dtype is not None:
        A = A.to(dtype)
    d0, d1 = dim
    if ord == "fro":
        return vector_norm(A, 2, dim, keepdim)
    if d0 % A.ndim == d1 % A.ndim:
        raise ValueError(f"linalg.matrix_norm: dims must be different, got {tuple(dim)}")
    if ord in (1, -1, float("inf"), float("-inf")):
        across, along = (d0, d1) if ord in (1, -1) else (d1, d0)   # column sums (1), row sums (inf)
        out = (_largest if ord > 0 else amin)(_sum(_abs(A), across, keepdim=True), along, keepdim=True)
        return out if keepdim else _squeeze2(out, d0, d1, A.ndim)
    if ord not in ("nuc", 2, -2):
        raise ValueError(f"linalg.matrix_norm: unsupported ord {ord!r}")
    # (the singular values of the matrices spanning dims d0 and d1, the other dims in order)
    s = svdvals(A.movedim((d0, d1), (-2, -1)))
    out = _sum(s, -1) if ord == "nuc" else _largest(s, -1) if ord == 2 else amin(s, -1)
    if keepdim:
        for d in sorted((d0 % A.ndim, d1 % A.ndim)):
            out = out.unsqueeze(d)
    return out


def _largest(x, dim: int, keepdim: bool = False):
    """amax over `dim`; 0 over an empty one (an empty matrix's norms, as PyTorch)."""
    if x.shape[dim] == 0:
        shape = list(x.shape)
        shape[dim] = 1
        return zeros(tuple(shape) if keepdim else tuple(shape[:dim % x.ndim] + shape[dim % x.ndim + 1:]),
                     dtype=x.dtype, device=x.device)
    return amax(x, dim, keepdim=keepdim)


def _squeeze2(t, d0, d1, nd):
    d0, d1 = d0 % nd, d1 % nd
    for d in sorted((d0, d1), reverse=True):
        t = t.squeeze(d)
    return t


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    if dim is not None and not isinstance(dim, int) and len(tuple(dim)) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, tuple(dim), keepdim, dtype=dtype)
    if isinstance(ord, str) or (ord is not None and dim is None and A.ndim == 2):
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


def inv_ex(A, *, check_errors: bool = False):
    """(inverse, info): a singular matrix gets info > 0 (LU's first zero pivot, 1-based) and
    NaNs, and raises only with `check_errors`."""
    return _InvEx(*_ex(inv, A, (), check_errors, "linalg.inv_ex", lambda M: lu_factor_ex(M).info))


def solve_ex(A, B, *, left: bool = True, check_errors: bool = False):
    return _Ex(*_ex(lambda M, B: solve(M, B, left=left), A, (B,), check_errors, "linalg.solve_ex",
                    lambda M: lu_factor_ex(M).info))


def cholesky_ex(A, *, upper: bool = False, check_errors: bool = False):
    """(L, info): a matrix that is not positive definite gets info > 0 (the order of its first
    leading minor that is not, as LAPACK's) and NaNs, and raises only with `check_errors`."""
    return _CholeskyEx(*_ex(lambda M: cholesky(M, upper=upper), A, (), check_errors, "linalg.cholesky_ex",
                            _cholesky_info))


def _ex(fn, A, rest, check_errors: bool, name: str, infos):
    """``fn(A, *rest)`` and LAPACK's info per matrix: where `fn` fails, the failing matrices
    are found (`infos`), computed as identities and their results set to NaN."""
    batch = tuple(A.shape[:-2])
    try:
        return fn(A, *rest), zeros(batch, dtype=_dt.int32, device=A.device)
    except (np.linalg.LinAlgError, LinAlgError) as e:
        info = infos(A.detach())
        if not bool(info.any()):
            raise
        if check_errors:
            raise LinAlgError(f"{name}: the factorization failed (info {info.tolist()}): {e}") from None
    from .ops.elementwise import where
    bad = (info > 0).reshape(batch + (1, 1))
    out = fn(where(bad, eye_of(tuple(A.shape[-2:]), A.dtype, A.device), A), *rest)
    bad = bad.reshape(batch + (1,) * (out.ndim - len(batch)))
    return where(bad, float("nan"), out), info


def _cholesky_info(A):
    """The 1-based order of each matrix's first leading minor that is not positive definite
    (0 if none): the minors' definiteness only fails from some order on, so a bisection."""
    a = A.numpy().astype(np.result_type(A.numpy().dtype, np.float32))
    flat = a.reshape((-1,) + a.shape[-2:])
    out = np.zeros(flat.shape[0], np.int32)
    for i, m in enumerate(flat):
        lo, hi = 0, m.shape[-1] + 1     # minors of order <= lo are definite, of order >= hi not
        while hi - lo > 1:
            k = (lo + hi) // 2
            try:
                np.linalg.cholesky(m[:k, :k])
                lo = k
            except np.linalg.LinAlgError:
                hi = k
        out[i] = 0 if hi > m.shape[-1] else hi
    return tensor(out.reshape(a.shape[:-2]), device=A.device)


def eigvalsh(A, UPLO: str = "L"):
    return eigh(A, UPLO).eigenvalues


def matrix_power(A, n: int):
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: expected square matrices, got shape {tuple(A.shape)}")
    if n == 0:
        return eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(tuple(A.shape)) * 1
    if n < 0:
        A, n = inv(A), -n
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def matrix_rank(A, *, atol=None, rtol=None, hermitian: bool = False, tol=None):
    s = svdvals(A.detach())
    smax = _largest(s, -1, keepdim=True)
    if tol is not None:
        atol = tol
    if rtol is None:
        rtol = 0.0 if atol else max(A.shape[-2:]) * float(finfo(A.dtype).eps)
    thresh = smax * rtol
    if atol:
        thresh = thresh.clamp(min=atol)
    return _sum((s > thresh).to(_dt.int64), -1)


def multi_dot(tensors):
    ts = list(tensors)
    if len(ts) < 2:
        raise ValueError("linalg.multi_dot: expected at least two tensors")
    first_vec, last_vec = ts[0].ndim == 1, ts[-1].ndim == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(-1)
    out = ts[0]
    for t in ts[1:]:
        out = matmul(out, t)
    if first_vec:
        out = out.squeeze(0)
    if last_vec:
        out = out.squeeze(-1)
    return out


@_autocast.lower
def vecdot(x, y, *, dim: int = -1):
    """sum(conj(x) * y) over `dim` (x conjugated, as PyTorch's)."""
    return _sum(conj(x) * y, dim)


def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1):
    return _diagonal(A, offset, dim1, dim2)


def cond(A, p=None):
    if p is None or p in (2, -2):
        s = svdvals(A)
        if s.shape[-1] == 0:
            return _largest(s, -1)   # (PyTorch's 0 for empty matrices)
        return amax(s, -1) / amin(s, -1) if p in (None, 2) else amin(s, -1) / amax(s, -1)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


@_autocast.fp32
def lstsq(A, B, rcond=None, *, driver=None):
    """Least squares through the pseudo-inverse, with the fields PyTorch's CPU `driver`
    fills: the rank (not for gels), the singular values (gelsd, gelss) and the squared
    residuals per column (not for gelsy; only for tall matrices of full rank)."""
    if driver is not None and driver not in _LSTSQ_DRIVERS:
        raise ValueError(f"linalg.lstsq: parameter `driver` should be one of {_LSTSQ_DRIVERS}, got {driver!r}")
    driver = driver or "gelsy"   # (PyTorch's default on the CPU)
    m, n = A.shape[-2:]
    # singular values at or below rcond * the largest do not count (the rank, the solution)
    rtol = max(m, n) * float(finfo(A.dtype).eps) if rcond is None or rcond < 0 else float(rcond)
    vec = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vec else B
    # (gels assumes full rank: rcond plays no part in it)
    sol = matmul(pinv(A) if driver == "gels" else pinv(A, rtol=rtol), b)
    a = A.detach()
    a = a.float() if a.dtype is _dt.bfloat16 else a     # (numpy has no bf16 of its own)
    s = np.linalg.svd(a.numpy(), compute_uv=False)
    rank = (s > rtol * s[..., :1]).sum(-1) if s.shape[-1] else np.zeros(s.shape[:-1], np.int64)
    real = _dt.float32 if A.dtype is _dt.complex64 else _dt.float64 if A.dtype is _dt.complex128 else A.dtype
    empty = tensor(np.zeros(0), dtype=real)
    residuals = empty
    if driver != "gelsy" and m > n and (driver == "gels" or bool(np.all(rank == n))):
        r = matmul(A, sol) - b
        residuals = _sum((r * conj(r)).real if r.dtype.is_complex else r * r, -2)
    return _Lstsq(sol.squeeze(-1) if vec else sol, residuals,
                  tensor(np.zeros(0), dtype=_dt.int64) if driver == "gels" else tensor(np.asarray(rank, np.int64)),
                  tensor(s, dtype=real) if driver in ("gelsd", "gelss") else empty)


def vander(x, *, N=None):
    n = x.shape[-1] if N is None else N
    from .ops.shape import stack
    cols = [x ** k for k in range(n)]
    return stack(cols, -1)


def tensorinv(A, ind: int = 2):
    out_shape = tuple(A.shape[ind:]) + tuple(A.shape[:ind])
    rows = int(np.prod(A.shape[:ind]))
    return inv(A.reshape(rows, -1)).reshape(out_shape)


def tensorsolve(A, B, dims=None):
    if dims is not None:   # (those dims of A go last, in order, as PyTorch moves them)
        dims = [d % A.ndim for d in dims]
        A = A.movedim(dims, list(range(A.ndim - len(dims), A.ndim)))
    n = int(np.prod(B.shape))
    x = solve(A.reshape(n, -1), B.reshape(n))
    return x.reshape(tuple(A.shape[B.ndim:]))


# ---------------------------------------------------------------- torch.* spellings
_SvdLegacy = namedtuple("svd", ["U", "S", "V"])
_QrLegacy = namedtuple("qr", ["Q", "R"])


def inverse(A):
    return inv(A)


def logdet(A):
    sign, logabs = slogdet(A)
    from .ops.elementwise import log as _log
    return logabs + _log(sign)


@_autocast.fp32
def pinverse(A, rcond: float = 1e-15):
    return pinv(A, rtol=rcond)


def svd_legacy(A, some: bool = True, compute_uv: bool = True):
    """``torch.svd``: (U, S, V) with V (not V^H); reduced unless ``some=False``."""
    u, s, vh = svd(A, full_matrices=not some)
    return _SvdLegacy(u, s, vh.transpose(-2, -1))


def qr_legacy(A, some: bool = True):
    q, r = qr(A, "reduced" if some else "complete")
    return _QrLegacy(q, r)


def cholesky_legacy(A, upper: bool = False):
    return cholesky(A, upper=upper)


# ---------------------------------------------------------------- eig, LU and friends
def eig(A):
    """Eigenvalues and unit-norm eigenvectors of a general real square matrix (complex)."""
    w, v = eig_parts(A)
    return _Eig(w, v)


def eigvals(A):
    return eig_parts(A, values_only=True)


def _need_pivot(pivot, name):
    if not pivot:
        raise NotImplementedError(f"{name}: LU without pivoting (pivot=False) is not implemented on the CPU")


def lu_factor(A, *, pivot: bool = True):
    _need_pivot(pivot, "linalg.lu_factor")
    return _LUFactor(*lu_factor_parts(A))


def lu_factor_ex(A, *, pivot: bool = True, check_errors: bool = False):
    _need_pivot(pivot, "linalg.lu_factor_ex")
    lu_, piv = lu_factor_parts(A)
    k = min(A.shape[-2], A.shape[-1])
    d = np.abs(np.diagonal(lu_.detach().numpy(), axis1=-2, axis2=-1)) == 0
    # LAPACK's info: the 1-based index of the first zero pivot, 0 when none
    info = np.where(d.any(-1), np.argmax(d, -1) + 1, 0).astype(np.int32) if k else np.zeros(d.shape[:-1], np.int32)
    if check_errors and info.any():
        raise RuntimeError("linalg.lu_factor_ex: the factorization could not be completed (a zero pivot: "
                           "the matrix is singular)")
    return _LUFactorEx(lu_, piv, tensor(info, device=A.device))


def lu_unpack(LU_data, LU_pivots, unpack_data: bool = True, unpack_pivots: bool = True):
    """(P, L, U) with A = P L U from `lu_factor`'s packed result."""
    from .ops.tensorfns import tril, triu
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    empty = tensor(np.zeros(0), dtype=LU_data.dtype)
    if unpack_data:
        lo = tril(LU_data, -1)[..., :, :k] + eye_of((m, k), LU_data.dtype, LU_data.device)
        up = triu(LU_data)[..., :k, :]
    else:
        lo = up = empty
    p = pivots_to_perm(LU_pivots, m, LU_data.dtype) if unpack_pivots else empty
    return _LU(p, lo, up)


def lu(A, *, pivot: bool = True):
    _need_pivot(pivot, "linalg.lu")
    return lu_unpack(*lu_factor_parts(A))


def lu_solve(LU, pivots, B, *, left: bool = True, adjoint: bool = False):
    """X with A X = B (A^T X = B when adjoint; X A = B when not left) for A = P L U."""
    if B.ndim < 2:
        raise ShapeError(f"linalg.lu_solve: B must be a batch of matrices, got shape {tuple(B.shape)}")
    if not left:   # X A = B  <=>  A^T X^T = B^T
        return lu_solve(LU, pivots, B.transpose(-2, -1), adjoint=not adjoint).transpose(-2, -1)
    p = pivots_to_perm(pivots, LU.shape[-1], LU.dtype)
    if adjoint:    # U^T L^T P^T X = B
        y = solve_triangular(LU.transpose(-2, -1), B, upper=False)
        y = solve_triangular(LU.transpose(-2, -1), y, upper=True, unitriangular=True)
        return matmul(p, y)
    y = solve_triangular(LU, matmul(p.transpose(-2, -1), B), upper=False, unitriangular=True)
    return solve_triangular(LU, y, upper=True)


def householder_product(A, tau):
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^H with v_i the i-th
    column below A's diagonal and a unit on it (LAPACK's orgqr)."""
    from .ops.tensorfns import tril
    m, n = A.shape[-2], A.shape[-1]
    k = tau.shape[-1]
    if not (m >= n >= k):
        raise ShapeError(f"linalg.householder_product: expected A (m, n) with m >= n >= tau's k, got "
                         f"{tuple(A.shape)} and tau {tuple(tau.shape)}")
    v = tril(A, -1) + eye_of((m, n), A.dtype, A.device)
    q = eye_of(tuple(A.shape[:-2]) + (m, m), A.dtype, A.device)
    for i in range(k):
        vi = v[..., :, i:i + 1]
        q = q - matmul(matmul(q, vi) * tau[..., i:i + 1].unsqueeze(-1), conj(vi.transpose(-2, -1)))
    return q[..., :, :n]


def ormqr(input, tau, other, left: bool = True, transpose: bool = False):
    """``other`` times the full Q = H_1 ... H_k of `householder_product`'s reflectors (Q on
    the left unless ``left=False``; Q^H when ``transpose``), without forming Q."""
    from .ops.tensorfns import tril
    m = input.shape[-2]
    k = tau.shape[-1]
    if (other.shape[-2] if left else other.shape[-1]) != m:
        raise ShapeError(f"ormqr: other of shape {tuple(other.shape)} does not match the reflectors' "
                         f"length {m} on the {'left' if left else 'right'}")
    v = tril(input, -1)[..., :, :k] + eye_of((m, k), input.dtype, input.device)
    first_h1 = left == transpose          # Q^T C and C Q apply H_1 first
    out = other
    for i in (range(k) if first_h1 else reversed(range(k))):
        vi, vh = v[..., :, i:i + 1], conj(v[..., :, i:i + 1].transpose(-2, -1))
        t = tau[..., i:i + 1].unsqueeze(-1)
        t = conj(t) if transpose else t   # (H_i^H = I - conj(tau_i) v_i v_i^H)
        if left:
            out = out - matmul(vi * t, matmul(vh, out))
        else:
            out = out - matmul(matmul(out, vi) * t, vh)
    return out


def cholesky_solve(B, L, upper: bool = False):
    """X with A X = B for A = L L^H (U^H U when upper), L its Cholesky factor."""
    if upper:
        y = solve_triangular(L.mH, B, upper=False)
        return solve_triangular(L, y, upper=True)
    y = solve_triangular(L, B, upper=False)
    return solve_triangular(L.mH, y, upper=True)


def cholesky_inverse(L, upper: bool = False):
    n = L.shape[-1]
    return cholesky_solve(eye_of(tuple(L.shape[:-2]) + (n, n), L.dtype, L.device), L, upper)


def triangular_solve(b, A, upper: bool = True, transpose: bool = False, unitriangular: bool = False):
    """``torch.triangular_solve``: (solution of A X = b, or A^T X = b, and a copy of A)."""
    a = A.transpose(-2, -1) if transpose else A
    x = solve_triangular(a, b, upper=upper != transpose, unitriangular=unitriangular)
    return _TriSolve(x, A.clone())


def lu_solve_legacy(b, LU_data, LU_pivots):
    """``torch.lu_solve(b, LU_data, LU_pivots)``."""
    return lu_solve(LU_data, LU_pivots, b)


def lu_legacy(A, pivot: bool = True, get_infos: bool = False):
    """``torch.lu``: (LU, pivots[, infos])."""
    r = lu_factor_ex(A, pivot=pivot)
    return tuple(r) if get_infos else (r.LU, r.pivots)


def nuclear_norm(input, dim=None, keepdim: bool = False):
    return matrix_norm(input, "nuc", (-2, -1) if dim is None else tuple(dim), keepdim)


def frobenius_norm(input, dim=(-2, -1), keepdim: bool = False):
    return vector_norm(input, 2, tuple(dim) if not isinstance(dim, int) else dim, keepdim)


def _ldl_checked(op, A, hermitian, check_errors):
    if not isinstance(hermitian, bool):
        raise TypeError(f"{op}: hermitian must be a bool, got {hermitian!r}")
    ld, piv, info = ldl_factor_parts(A)
    if check_errors:
        bad = np.asarray(info.numpy())
        if bad.any():
            i = int(bad[bad > 0].min()) - 1         # LAPACK's info is 1-based
            raise LinAlgError(f"{op}: the factorization could not be completed: D[{i}, {i}] is exactly zero "
                              f"(the matrix is singular)")
    return ld, piv, info


def ldl_factor_ex(A, *, hermitian: bool = False, check_errors: bool = False):
    """(LD, pivots, info): A = P L D L^T P^T of symmetric `A` (its lower triangle) with
    Bunch-Kaufman pivoting, packed as LAPACK's sytrf (real matrices: `hermitian` is the same)."""
    return _LDLFactorEx(*_ldl_checked("linalg.ldl_factor_ex", A, hermitian, check_errors))


def ldl_factor(A, *, hermitian: bool = False):
    """(LD, pivots) of `ldl_factor_ex`; a singular D raises LinAlgError."""
    ld, piv, _ = _ldl_checked("linalg.ldl_factor", A, hermitian, True)
    return _LDLFactor(ld, piv)


def ldl_solve(LD, pivots, B, *, hermitian: bool = False):
    """X with A X = B for A packed by `ldl_factor` (gradients reach B and LD)."""
    if not isinstance(hermitian, bool):
        raise TypeError(f"linalg.ldl_solve: hermitian must be a bool, got {hermitian!r}")
    return _ldl_solve(LD, pivots, B)


from .outarg import LINALG_OUT_FUNCTIONS as _OUT_FUNCTIONS, install_out as _install_out  # noqa: E402
_install_out(globals(), _OUT_FUNCTIONS)
