"""``nn.utils.parametrizations``: weight normalization and spectral normalization as
parametrizations (PyTorch's current forms; the older hook forms are in ``norms.py``)."""
from __future__ import annotations

from ... import ops
from ...ops.normalization_more import normalize as _normalize
from ...autograd.grad_mode import no_grad
from ...tensor import Tensor
from ..module import Module
from .parametrize import register_parametrization

__all__ = ["weight_norm", "spectral_norm"]


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
    direction are ``parametrizations.<name>.original0`` and ``original1``."""
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


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
