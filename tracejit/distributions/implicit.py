"""Implicit reparameterization gradients of the standard gamma draw (PyTorch's
``_standard_gamma_grad``): for x ~ Gamma(alpha, 1), dx/dalpha = -(dF/dalpha) / p(x), F the
gamma CDF, by the approximations PyTorch uses (Jankowiak & Obermeyer, "Pathwise
derivatives beyond the reparameterization trick", 2018):

- x < 0.8: the power series of F and of dF/dalpha (six terms);
- alpha > 8: Rice's saddle-point expansion (a polynomial form near x = alpha);
- otherwise: a bivariate rational approximation in log(x / alpha) and log(alpha).

`reparameterized_gamma` attaches that gradient to given draws: its value is the draw,
its gradient with respect to alpha the formula's (first order, as PyTorch's).
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor

__all__ = ["standard_gamma_grad", "reparameterized_gamma"]

# rows: the constant, log(x/alpha) and log(x/alpha)^2 coefficients of the eight numerator
# (first four) and denominator (last four) coefficients of a cubic in log(alpha)
_RATIONAL = np.array([
    [0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084],
    [0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915,
     -0.00058392623],
    [0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326,
     0.00085092367, -1.5247877e-07]])


def _small_x(alpha, x):
    from ..ops.math_more import _digamma_np
    numer, denom = np.ones_like(x), alpha.copy()
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / i)
        denom = denom + 1
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = x ** alpha
    pdf = x ** (alpha - 1) * np.exp(-x)
    cdf = pow_x_alpha * series1
    cdf_alpha = (np.log(x) - _digamma_np(alpha)) * cdf - pow_x_alpha * series2
    out = -cdf_alpha / pdf
    return np.where(np.isnan(out), 0.0, out)


def _large_alpha(alpha, x):
    near = (0.9 * alpha <= x) & (x <= 1.1 * alpha)
    numer_1 = 1 + 24 * alpha * (1 + 12 * alpha)
    numer_2 = (1440 * alpha * alpha + 6 * x * (53 - 120 * x) - 65 * x * x / alpha
               + alpha * (107 + 3600 * x))
    polynomial = numer_1 * numer_2 / (1244160 * alpha ** 4)
    denom = np.sqrt(8 * alpha)
    term2 = denom / (alpha - x)
    term3 = (x - alpha - alpha * np.log(x / alpha)) ** -1.5
    term23 = np.where(x < alpha, term2 - term3, term2 + term3)
    term1 = np.log(x / alpha) * term23 - np.sqrt(2 / alpha) * (alpha + x) / (alpha - x) ** 2
    stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    saddle = -stirling * x * term1 / denom
    return np.where(near, polynomial, saddle)


def _rational(alpha, x):
    u, v = np.log(x / alpha), np.log(alpha)
    c = [_RATIONAL[0, i] + u * (_RATIONAL[1, i] + u * _RATIONAL[2, i]) for i in range(8)]
    p = c[0] + v * (c[1] + v * (c[2] + v * c[3]))
    q = c[4] + v * (c[5] + v * (c[6] + v * c[7]))
    return np.exp(p / q)


def standard_gamma_grad(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dx/dalpha of standard gamma draws `x` of concentrations `alpha` (float64 numpy)."""
    alpha, x = np.broadcast_arrays(np.asarray(alpha, np.float64), np.asarray(x, np.float64))
    with np.errstate(all="ignore"):
        small, large = x < 0.8, alpha > 8.0
        out = np.where(small, _small_x(alpha, x),
                       np.where(large, _large_alpha(alpha, x), _rational(alpha, x)))
    return out


def reparameterized_gamma(alpha: Tensor, draws: Tensor) -> Tensor:
    """`draws` (standard gamma draws of `alpha`, alpha's shape) with the implicit gradient
    with respect to alpha: draws + (alpha - alpha.detach()) * dx/dalpha."""
    from ..ops import tensor
    if not alpha.requires_grad:
        return draws
    grad = standard_gamma_grad(alpha.detach().numpy(), draws.detach().numpy())
    grad = tensor(grad.astype(alpha.dtype.np), device=alpha.device)
    return draws + (alpha - alpha.detach()) * grad
