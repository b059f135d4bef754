"""``tracejit.special``: ``torch.special``'s functions that have real results here, as
composites of tracejit's ops (so they differentiate where their parts do)."""
from __future__ import annotations

import math

from . import dtypes as _dt
from .ops.composite import log_softmax as _log_softmax, softmax as _softmax
from .ops.elementwise import erf, exp, expm1, log, log1p, sigmoid
from .ops.math_more import (digamma, erfc, erfinv, exp2, lgamma, logit, round, sinc,  # noqa: F401
                            xlogy)
from .ops.special_fns import i0, i0e, i1, i1e, igamma as gammainc, igammac as gammaincc, polygamma, zeta  # noqa: F401
from .ops.special_bessel import (airy_ai, bessel_j0, bessel_j1, bessel_y0, bessel_y1,  # noqa: F401
                                 modified_bessel_k0, modified_bessel_k1, scaled_modified_bessel_k0,
                                 scaled_modified_bessel_k1, spherical_bessel_j0)
from .ops.special_poly import *  # noqa: F401,F403
from .ops import special_poly as _poly
from .ops.reductions import logsumexp, sum as _sum

__all__ = ["digamma", "psi", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammaln", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln",
           "ndtr", "ndtri", "polygamma", "i0", "i0e", "i1", "i1e", "round", "sinc", "softmax", "xlog1py", "xlogy",
           "zeta", "gammainc", "gammaincc", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
           "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
           "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0",
           "airy_ai"] + list(_poly.__all__)

psi = digamma
modified_bessel_i0 = i0
modified_bessel_i1 = i1
gammaln = lgamma
expit = sigmoid


def entr(input):
    """-x log x for x > 0, 0 at 0, -inf below."""
    safe = input.clamp(min=1e-300) if input.dtype.name == "float64" else input.clamp(min=1e-38)
    out = -input * log(safe)
    from .ops.elementwise import where
    out = where(input == 0, 0.0, out)
    return where(input < 0, float("-inf"), out)


def erfcx(input):
    """exp(x^2) erfc(x), in float64 (exp(x^2) overflows float32 past 9.4); past 25 by its
    asymptotic series 1/(x sqrt(pi)) (1 - u + 3u^2 - 15u^3 ...), u = 1 / (2 x^2)."""
    from .ops.elementwise import cast, where
    x = cast(input, _dt.float64) if input.dtype is not _dt.float64 else input
    near = x < 25
    xs, xl = where(near, x, 0.0), where(near, 25.0, x)   # (each branch's gradient stays finite)
    u = 0.5 / (xl * xl)
    series = 1.0
    for k in (11, 9, 7, 5, 3, 1):
        series = 1 - k * u * series
    out = where(near, exp(xs * xs) * erfc(xs), series / (xl * math.sqrt(math.pi)))
    return out if input.dtype is _dt.float64 else cast(out, input.dtype if input.dtype.is_floating_point
                                                          else _dt.get_default_dtype())


def ndtr(input):
    return 0.5 * (1 + erf(input * (1 / math.sqrt(2))))


def log_ndtr(input):
    """log of the normal CDF; below -1 from erfcx (log(ndtr) underflows to -inf past -9.4 in
    float32), above from log1p of the upper tail."""
    from .ops.elementwise import where
    low = input < -1
    xa, xb = where(low, input, -1.0), where(low, 0.0, input)
    r2 = 1 / math.sqrt(2)
    return where(low, log(erfcx(-xa * r2) * 0.5) - xa * xa * 0.5, log1p(erfc(xb * r2) * -0.5))


def ndtri(input):
    """The normal quantile; below 0.01 (where 2p - 1 rounds toward -1) the tail
    approximation sqrt(-2 log p) - ... refined by Newton steps on log_ndtr, in float64."""
    from .ops.elementwise import cast, sqrt, where
    p = cast(input, _dt.float64) if input.dtype is not _dt.float64 else input
    tail = (p < 0.01) & (p > 0)
    pt = where(tail, p, 0.005)
    t = sqrt(-2 * log(pt))
    x = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))))
    for _ in range(3):   # (each step about squares the relative error, 4.5e-4 at the start)
        x = x - (log_ndtr(x) - log(pt)) * math.sqrt(math.pi / 2) * erfcx(x * -(1 / math.sqrt(2)))
    out = where(tail, x, math.sqrt(2) * erfinv(2 * where(tail, 0.5, p) - 1))
    out = where((p < 0) | (p > 1), math.nan, out)
    return out if input.dtype is _dt.float64 else cast(out, input.dtype if input.dtype.is_floating_point
                                                          else _dt.get_default_dtype())


def multigammaln(input, p: int):
    c = p * (p - 1) / 4 * math.log(math.pi)
    from .ops.shape import stack
    terms = stack([lgamma(input - j / 2) for j in range(p)], -1)
    return _sum(terms, -1) + c


def xlog1py(input, other):
    """x * log1p(y), 0 where x == 0 and y is not nan."""
    from .ops.math_more import x_times_log
    return x_times_log(input, other, log1p, 0.0, "xlog1py")


def softmax(input, dim, *, dtype=None):
    return _softmax(input if dtype is None else input.to(dtype), dim)


def log_softmax(input, dim, *, dtype=None):
    return _log_softmax(input if dtype is None else input.to(dtype), dim)



from .outarg import SPECIAL_OUT_FUNCTIONS as _OUT_FUNCTIONS, install_out as _install_out  # noqa: E402
_install_out(globals(), _OUT_FUNCTIONS, "special_")   # (expit, gammaln, psi, ... each their own wrapper)
