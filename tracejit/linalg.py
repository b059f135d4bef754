"""``tracejit.linalg``: ``torch.linalg``'s functions on real tensors.

The decompositions and solvers are primitives in tracejit/ops/linalg_dense.py (LAPACK via
numpy, PyTorch's gradients where it documents them); norms, powers, products and the
``*_ex`` variants are composites of those and of the core ops. The general eigensolvers
(eig, eigvals), whose results are complex, are not available.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from . import dtypes as _dt
from .errors import ShapeError
from .ops.creation import eye, tensor, zeros
from .ops.elementwise import abs as _abs, sqrt
from .ops.linalg import matmul
from .ops.linalg_dense import cholesky, det, eigh, inv, pinv, qr, slogdet, solve, svd
from .ops.products import linalg_cross as cross
from .ops.rearrange import diagonal as _diagonal
from .ops.reductions import amax, amin, sum as _sum

__all__ = ["norm", "vector_norm", "matrix_norm", "det", "slogdet", "inv", "inv_ex", "solve", "solve_ex",
           "cholesky", "cholesky_ex", "eigh", "eigvalsh", "qr", "svd", "svdvals", "pinv",
           "matrix_power", "matrix_rank", "multi_dot", "vecdot", "cross", "diagonal", "matmul",
           "cond", "lstsq", "vander", "tensorinv", "tensorsolve"]

_Ex = namedtuple("_Ex", ["result", "info"])
_Lstsq = namedtuple("lstsq", ["solution", "residuals", "rank", "singular_values"])


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None):  # noqa: A002
    if dtype is not None:
        x = x.to(dtype)
    a = _abs(x)
    if x.dtype.is_complex:   # (the norm of the moduli)
        x = a
    if ord == float("inf"):
        return amax(a, dim, keepdim) if dim is not None else amax(a)
    if ord == float("-inf"):
        return amin(a, dim, keepdim) if dim is not None else amin(a)
    if ord == 0:
        return _sum((a != 0).to(x.dtype), dim, keepdim=keepdim) if dim is not None else _sum((a != 0).to(x.dtype))
    if ord == 2:
        s = _sum(x * x, dim, keepdim=keepdim) if dim is not None else _sum(x * x)
        return sqrt(s)
    if ord == 1:
        return _sum(a, dim, keepdim=keepdim) if dim is not None else _sum(a)
    s = _sum(a ** ord, dim, keepdim=keepdim) if dim is not None else _sum(a ** ord)
    return s ** (1.0 / ord)


def svdvals(A):
    return svd(A, full_matrices=False).S


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None):  # noqa: A002
    if dtype is not None:
        A = A.to(dtype)
    d0, d1 = dim
    if ord == "fro":
        return vector_norm(A, 2, dim, keepdim)
    if ord == "nuc":
        out = _sum(svdvals(A), -1)
    elif ord in (1, -1):
        col = _sum(_abs(A), d0, keepdim=True)
        out = (amax if ord == 1 else amin)(col, d1, keepdim=True)
        return out if keepdim else _squeeze2(out, d0, d1, A.ndim)
    elif ord in (float("inf"), float("-inf")):
        row = _sum(_abs(A), d1, keepdim=True)
        out = (amax if ord > 0 else amin)(row, d0, keepdim=True)
        return out if keepdim else _squeeze2(out, d0, d1, A.ndim)
    elif ord in (2, -2):
        s = svdvals(A)
        out = amax(s, -1) if ord == 2 else amin(s, -1)
    else:
        raise ValueError(f"linalg.matrix_norm: unsupported ord {ord!r}")
    if keepdim:
        out = out.unsqueeze(-1).unsqueeze(-1)
    return out


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
    return _Ex(inv(A), zeros(tuple(A.shape[:-2]), dtype=_dt.int32))


def solve_ex(A, B, *, left: bool = True, check_errors: bool = False):
    return _Ex(solve(A, B, left=left), zeros(tuple(A.shape[:-2]), dtype=_dt.int32))


def cholesky_ex(A, *, upper: bool = False, check_errors: bool = False):
    return _Ex(cholesky(A, upper=upper), zeros(tuple(A.shape[:-2]), dtype=_dt.int32))


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
    smax = amax(s, -1, keepdim=True)
    if tol is not None:
        atol = tol
    if rtol is None:
        rtol = 0.0 if atol else max(A.shape[-2:]) * float(np.finfo(A.dtype.np).eps)
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


def vecdot(x, y, *, dim: int = -1):
    return _sum(x * y, dim)


def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1):
    return _diagonal(A, offset, dim1, dim2)


def cond(A, p=None):
    if p is None or p in (2, -2):
        s = svdvals(A)
        return amax(s, -1) / amin(s, -1) if p in (None, 2) else amin(s, -1) / amax(s, -1)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def lstsq(A, B, rcond=None, *, driver=None):
    """Least squares through the pseudo-inverse (no gradient, as pinv has none here)."""
    vec = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vec else B
    sol = matmul(pinv(A), b)
    if vec:
        sol = sol.squeeze(-1)
    empty = tensor(np.zeros(0), dtype=A.dtype)
    # PyTorch's default CPU driver (gelsy) gives the rank per matrix, no residuals or
    # singular values
    rank = np.asarray(np.linalg.matrix_rank(A.detach().numpy(), rcond), dtype=np.int64)
    return _Lstsq(sol, empty, tensor(rank), empty)


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
    if dims is not None:
        raise NotImplementedError("linalg.tensorsolve: dims is not supported")
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
