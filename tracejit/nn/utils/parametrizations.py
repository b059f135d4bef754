"""``nn.utils.parametrizations``: weight normalization and spectral normalization as
parametrizations (PyTorch's current forms; the older hook forms are in ``norms.py``), and
orthogonal matrices (``orthogonal``)."""
from __future__ import annotations

import functools

import numpy as np

from ... import ops
from ...ops.normalization_more import normalize as _normalize
from ...autograd.grad_mode import no_grad
from ...linalg import householder_product, matrix_exp, solve
from ...typeinfo import finfo
from ...tensor import Tensor
from ..module import Module
from .parametrize import register_parametrization

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The `pow`-norm of `v` over every dim but `dim`, shaped to broadcast against `v`
    (``dim=-1``: the norm of the whole tensor, as PyTorch's)."""
    if dim == -1:
        return ops.norm(v, pow)
    dims = tuple(d for d in range(v.dim()) if d != dim)
    return ops.norm(v, pow, dim=dims, keepdim=True) if dims else v.abs()


class _WeightNorm(Module):
    def __init__(self, dim: int | None) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / norm_except_dim(weight_v, 2, self.dim))

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """``weight = g * v / ||v||`` with the norm over every dim but `dim`; the magnitude and
    direction are ``parametrizations.<name>.original0`` and ``original1``. A checkpoint of
    the hook form (``<name>_g``, ``<name>_v``) loads into them, as PyTorch's."""
    register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    module._register_load_state_dict_pre_hook(functools.partial(_hook_form_keys, name))
    return module


def _hook_form_keys(name: str, state_dict, prefix: str, *_) -> None:
    """A load_state_dict pre-hook: the hook form's ``<name>_g``/``<name>_v`` entries renamed
    to the parametrization's originals."""
    g, v = f"{prefix}{name}_g", f"{prefix}{name}_v"
    if g in state_dict and v in state_dict:
        state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g)
        state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v)


def _matrix(weight: Tensor, dim: int) -> Tensor:
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.dim()) if d != dim))
    return weight.flatten(1)


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.dim()
        if not -ndim <= dim < max(ndim, 1):
            raise IndexError(f"spectral_norm: dim {dim} is out of range for a {ndim}-d weight")
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: n_power_iterations must be positive, got "
                             f"{n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            mat = _matrix(weight, self.dim)
            h, w = mat.shape
            u = _normalize(ops.randn(h, dtype=weight.dtype), dim=0, eps=eps)
            v = _normalize(ops.randn(w, dtype=weight.dtype), dim=0, eps=eps)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)
            self._power_method(mat, 15)

    def _power_method(self, mat: Tensor, n: int) -> None:
        with no_grad():
            m = mat.detach()
            for _ in range(n):
                self._u.copy_(_normalize(ops.mv(m, self._v), dim=0, eps=self.eps))
                self._v.copy_(_normalize(ops.mv(m.t(), self._u), dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.dim() == 1:
            return _normalize(weight, dim=0, eps=self.eps)
        mat = _matrix(weight, self.dim)
        if self.training:
            self._power_method(mat, self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = ops.dot(u, ops.mv(mat, v))
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """``weight / sigma`` with sigma the largest singular value of the weight (as a matrix over
    `dim`), estimated by power iteration, one step per training forward."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"spectral_norm: module {type(module).__name__} has no parameter or buffer "
                         f"named {name!r}")
    if dim is None:
        dim = 1 if type(module).__name__ in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d") else 0
    return register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))


# ---- orthogonal -------------------------------------------------------------------------------
_ORTH_MAPS = ("matrix_exp", "cayley", "householder")


def _geqrf(a: Tensor) -> tuple[Tensor, Tensor]:
    """LAPACK's QR in compact form (reflectors below R's diagonal, and their scales), per
    matrix of a batch; values only (used under no_grad)."""
    x = a.detach().numpy().astype(np.float64)
    flat = x.reshape((-1,) + x.shape[-2:])
    hs, taus = [], []
    for m in flat:
        h, tau = np.linalg.qr(m, mode="raw")
        hs.append(h.T)
        taus.append(tau)
    h = np.stack(hs).reshape(x.shape).astype(x.dtype)
    tau = np.stack(taus).reshape(x.shape[:-2] + (min(x.shape[-2:]),))
    return ops.tensor(h, dtype=a.dtype), ops.tensor(tau, dtype=a.dtype)


def _make_orthogonal(a: Tensor) -> Tensor:
    """The Q of ``a = QR`` with R's diagonal made positive."""
    x, tau = _geqrf(a)
    q = householder_product(x, tau)
    return q * x.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


def _is_orthogonal(q: Tensor) -> bool:
    n, k = q.shape[-2], q.shape[-1]
    eps = 10.0 * n * finfo(q.dtype).eps
    return bool(ops.allclose(q.mT @ q, ops.eye(k, dtype=q.dtype), atol=eps))


class _Orthogonal(Module):
    """An orthogonal matrix (or batch) from an unconstrained one by the matrix exponential or
    Cayley map of a skew-symmetric matrix, or a product of Householder reflections; with
    `use_trivialization`, times a buffer ``base`` that assignment sets."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *, use_trivialization: bool = True) -> None:
        super().__init__()
        if weight.is_complex() and orthogonal_map == "householder":
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:   # embed the tall matrix in a square one
                X = ops.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mH
            if self.orthogonal_map == "matrix_exp":
                Q = matrix_exp(A)
            else:        # (I + A/2)(I - A/2)^-1
                eye = ops.eye(n, dtype=A.dtype)
                Q = solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = householder_product(A, tau)
            # X's diagonal holds the signs (+-1) of the reflections, kept out of the gradient
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q: Tensor) -> Tensor:
        if Q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. Got a tensor of "
                             f"shape {Q.shape}.")
        Q_init = Q
        n, k = Q.shape[-2], Q.shape[-1]
        transpose = n < k
        if transpose:
            Q = Q.mT
            n, k = k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in ("matrix_exp", "cayley"):
                raise NotImplementedError("It is not possible to assign to the matrix exponential or the "
                                          "Cayley parametrizations when use_trivialization=False.")
            # the reflectors of Q's QR, with R's diagonal signs where householder reads them
            A, tau = _geqrf(Q)
            sign = A.diagonal(dim1=-2, dim2=-1).sign()
            sign = ops.where(tau == 0.0, -sign, sign)
            eye = ops.eye(A.shape[-2], A.shape[-1], dtype=A.dtype)
            A = A * (1 - eye) + eye * sign.unsqueeze(-2)
            return A.mT if transpose else A
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q) else _make_orthogonal(Q)
        else:        # complete Q to a square orthogonal matrix
            N = ops.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype)
            Q = _make_orthogonal(ops.cat([Q, N], dim=-1))
        self.base = Q
        # -I: the Householder map's diagonal, and householder(zeros) == eye
        return (-ops.eye(Q_init.shape[-2], Q_init.shape[-1], dtype=Q_init.dtype)).expand(Q_init.shape).clone()


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Make ``module.<name>`` (a matrix or batch of matrices) orthogonal: columns or rows
    orthonormal, whichever are fewer. ``orthogonal_map``: "matrix_exp" (default for square),
    "cayley" or "householder" (default otherwise); assigning an orthogonal matrix to
    ``module.<name>`` sets the parametrization to produce it."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.is_complex() \
            else "householder"
    if orthogonal_map not in _ORTH_MAPS:
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". Got: '
                         f"{orthogonal_map}")
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    return register_parametrization(module, name, orth, unsafe=True)
