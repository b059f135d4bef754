"""``torch.svd_lowrank`` and ``torch.pca_lowrank``: a rank-`q` truncated SVD by randomized
range finding (a random Gaussian sketch, `niter` power iterations re-orthogonalized by QR,
then the SVD of the small projected matrix), differentiable through QR and SVD. The sketch
is drawn from the default generator, so factors equal PyTorch's up to that draw."""
from __future__ import annotations

from typing import Optional

from .ops.linalg import matmul
from .ops.linalg_dense import qr, svd
from .tensor import Tensor

__all__ = ["svd_lowrank", "pca_lowrank"]


def _mH(x: Tensor) -> Tensor:
    x = x.transpose(-2, -1)
    return x.conj() if x.dtype.is_complex else x


def _range_basis(a: Tensor, q: int, niter: int) -> Tensor:
    """An orthonormal (m, q) basis approximately spanning `a`'s top-q left singular space."""
    from .ops.random import randn
    sketch = randn(*a.shape[:-2], a.shape[-1], q, dtype=a.dtype, device=a.device)
    basis = qr(matmul(a, sketch)).Q
    for _ in range(niter):   # (each pass sharpens the spectrum's decay: A A^H applied once)
        basis = qr(matmul(a, qr(matmul(_mH(a), basis)).Q)).Q
    return basis


def svd_lowrank(A: Tensor, q: Optional[int] = 6, niter: int = 2, M: Optional[Tensor] = None) -> tuple:
    """(U, S, V) with ``A - M ≈ U diag(S) V^H``, U (m, q), S (q,), V (n, q)."""
    q = 6 if q is None else q
    m, n = A.shape[-2:]
    if not 0 <= q <= min(m, n):
        raise ValueError(f"svd_lowrank: q={q} must be between 0 and min(m, n) = {min(m, n)}")
    if niter < 0:
        raise ValueError(f"svd_lowrank: niter must be non-negative, got {niter}")
    a = A if M is None else A - M
    wide = m < n
    if wide:   # (the sketch is taken of the side with fewer rows)
        a = _mH(a)
    basis = _range_basis(a, q, niter)
    u, s, vh = svd(matmul(_mH(basis), a), full_matrices=False)
    u, v = matmul(basis, u), _mH(vh)
    return (v, s, u) if wide else (u, s, v)


def pca_lowrank(A: Tensor, q: Optional[int] = None, center: bool = True, niter: int = 2) -> tuple:
    """svd_lowrank of A with each column's mean taken away (``center``): V's columns are
    the principal directions, S**2 / (m - 1) the variances along them."""
    m, n = A.shape[-2:]
    q = min(6, m, n) if q is None else q
    if not 0 <= q <= min(m, n):
        raise ValueError(f"pca_lowrank: q={q} must be between 0 and min(m, n) = {min(m, n)}")
    return svd_lowrank(A, q, niter, A.mean(-2, keepdim=True) if center else None)
