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

__all__ = ["standard_gamma_grad", "reparameterized_gamma", "dirichlet_grad", "reparameterized_dirichlet"]

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
    grad = tensor(grad, dtype=alpha.dtype, device=alpha.device)
    return draws + (alpha - alpha.detach()) * grad


# ---------------------------------------------------------------- Dirichlet / Beta
# PyTorch's ``_dirichlet_grad``: x_j ~ Beta(alpha_j, total - alpha_j) marginally, and
# -(dF/dalpha)/p(x)/(1-x) of that Beta's CDF F by four approximations, by region:
# x near 0 or near 1 (Taylor series), alpha and beta both large (Rice's saddle point),
# otherwise an analytic form times a rational correction in log x, log(alpha/x), log total.
# _BETA_RATIONAL[k, i, j]: the cubic-in-b coefficients of u^i a^j, numerator (k=0), denominator (k=1)
_BETA_RATIONAL = np.array([
    [[[1.003668233, -0.01061107488, -0.0657888334, 0.01201642863],
      [0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033],
      [-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013]],
     [[0.221950385, -0.3187676331, 0.01799915743, 0.01074823814],
      [-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057],
      [0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05]],
     [[-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565],
      [0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181],
      [0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05]]],
    [[[1, -0.02924021934, -0.04438342661, 0.007285809825],
      [0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521],
      [-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149]],
     [[0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273],
      [0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956],
      [-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05]],
     [[0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05],
      [0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05],
      [-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06]]]])


def _beta_alpha_small(x, alpha, beta):
    """d x / d alpha near x = 0: a ten-term series in x."""
    from ..ops.math_more import _digamma_np
    factor = _digamma_np(alpha) - _digamma_np(alpha + beta) - np.log(x)
    numer = np.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * (i - beta) * x / i
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    out = x * (1 - x) ** -beta * series
    return np.where(np.isnan(out), 0.0, out)


def _beta_beta_small(x, alpha, beta):
    """d x / d beta of Beta(alpha, beta) near x = 0: an eight-term series in x."""
    from ..ops.math_more import _digamma_np
    factor = _digamma_np(alpha + beta) - _digamma_np(beta)
    numer, betas, dbetas = np.ones_like(x), np.ones_like(x), np.zeros_like(x)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * -x / i
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    out = -(1 - x) ** (1 - beta) * series
    return np.where(np.isnan(out), 0.0, out)


def _beta_alpha_mid(x, alpha, beta):
    """d x / d alpha for alpha, beta both large: Rice's saddle-point expansion, a
    polynomial within a tenth of a standard deviation of the mean (its singularity)."""
    total = alpha + beta
    mean = alpha / total
    std = np.sqrt(alpha * beta / (total + 1)) / total
    b2 = beta * beta
    poly = 47 * x * b2 * b2 + alpha * (
        (43 + 20 * (16 + 27 * beta) * x) * b2 * beta + alpha * (
            3 * (59 + 180 * beta - 90 * x) * b2 + alpha * (
                (453 + 1620 * beta * (1 - x) - 455 * x) * beta + alpha * (8 * (1 - x) * (135 * beta - 11)))))
    pre_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    pre_den = 12960 * alpha ** 3 * b2 * (1 + 12 * total)
    near = pre_num / (1 - x) * poly / pre_den
    prefactor = -x / np.sqrt(2 * alpha * beta / total)
    stirling = ((1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) * (1 + 1 / (12 * beta) + 1 / (288 * b2))
                / (1 + 1 / (12 * total) + 1 / (288 * total * total)))
    axbx = alpha * (x - 1) + beta * x
    term1 = ((2 * alpha * alpha * (x - 1) + alpha * beta * (x - 1) - x * b2)
             / (np.sqrt(2 * alpha / beta) * total ** 1.5 * axbx * axbx))
    term2 = 0.5 * np.log(alpha / (total * x))
    term3 = np.sqrt(8 * alpha * beta / total) / axbx
    term4 = (beta * np.log(beta / (total * (1 - x))) + alpha * np.log(alpha / (total * x))) ** -1.5
    far = stirling * prefactor * (term1 + term2 * (term3 + np.where(x < mean, term4, -term4)))
    return np.where((mean - 0.1 * std <= x) & (x <= mean + 0.1 * std), near, far)


def _beta_rational(x, alpha, total):
    from ..ops.math_more import _digamma_np
    u = np.log(x)
    a = np.log(alpha) - u
    b = np.log(total) - a
    p, q = np.zeros_like(x), np.zeros_like(x)
    for i, ui in enumerate((1.0, u, u * u)):
        for j, aj in enumerate((1.0, a, a * a)):
            cp, cq = _BETA_RATIONAL[0, i, j], _BETA_RATIONAL[1, i, j]
            p = p + ui * aj * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
            q = q + ui * aj * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
    return p / q * x * (_digamma_np(total) - _digamma_np(alpha)) / (total - alpha)


def dirichlet_grad(x: np.ndarray, alpha: np.ndarray, total: np.ndarray) -> np.ndarray:
    """PyTorch's ``_dirichlet_grad(x, alpha, total)`` (float64 numpy): for x_j ~
    Beta(alpha_j, total_j - alpha_j), -(dF/dalpha)/p(x)/(1 - x)."""
    x, alpha, total = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (x, alpha, total)))
    beta = total - alpha
    boundary = total * x * (1 - x)
    with np.errstate(all="ignore"):
        return np.where((x <= 0.5) & (boundary < 2.5), _beta_alpha_small(x, alpha, beta),
                        np.where((x >= 0.5) & (boundary < 0.75), -_beta_beta_small(1 - x, beta, alpha),
                                 np.where((alpha > 6) & (beta > 6), _beta_alpha_mid(x, alpha, beta),
                                          _beta_rational(x, alpha, total))))


def reparameterized_dirichlet(concentration: Tensor, draws: Tensor) -> Tensor:
    """Dirichlet `draws` (the last dim: the simplex) of `concentration` with PyTorch's
    implicit gradient: d x_i / d alpha_j = G_j (delta_ij - x_i), G = `dirichlet_grad`."""
    from ..ops import tensor
    if not concentration.requires_grad:
        return draws
    x, c = draws.detach().numpy(), concentration.detach().numpy()
    g = dirichlet_grad(x, c, c.sum(-1, keepdims=True))
    s = (concentration - concentration.detach()) * tensor(g.astype(x.dtype), device=draws.device)
    return draws + s - draws.detach() * s.sum(-1, keepdim=True)
