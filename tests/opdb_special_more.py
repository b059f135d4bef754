"""Op records for the Hurwitz zeta, the incomplete gamma functions
(tracejit/ops/special_fns.py), the Bessel and Airy functions
(tracejit/ops/special_bessel.py) and the orthogonal polynomials
(tracejit/ops/special_poly.py). References are independent of the implementations: the
zeta series summed directly with its integral tail, the incomplete gamma's all-positive
series, the Bessel/Airy power series in 60-digit decimal arithmetic (no cancellation),
numpy.polynomial's bases and the explicit sums of the Chebyshev polynomials."""
from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np

from opdb import Sample, register


def _in(lo, hi):
    def make(rng, shape, dtype):
        return np.asarray(rng.uniform(lo, hi, shape), dtype.np)
    return make


def _zeta_ref(s, q):
    k = np.arange(20000, dtype=np.float64)
    s, q = np.broadcast_arrays(s, q)
    head = ((q[..., None] + k) ** -s[..., None]).sum(-1)
    end = q + k[-1] + 1
    return head + end ** (1 - s) / (s - 1) + 0.5 * end ** -s


def _igamma_ref(a, x, upper=False):
    a, x = np.broadcast_arrays(a, x)
    term = np.ones_like(a)
    total = term.copy()
    for k in range(1, 400):
        term = term * x / (a + k)
        total = total + term
    lg = np.vectorize(math.lgamma)(a + 1)
    p = np.exp(a * np.log(x) - x - lg) * total
    return 1 - p if upper else p


def _two(make_a, make_b):
    def samples(dtype, rng):
        return [Sample((make_a(rng, (3, 4), dtype), make_b(rng, (3, 4), dtype)), grad=(1,)),
                Sample((make_a(rng, (5,), dtype), make_b(rng, (5,), dtype)), grad=(1,))]
    return samples


register("special.zeta", lambda m, s, q: m.special.zeta(s, q), _zeta_ref, _two(_in(1.5, 4.0), _in(0.3, 3.0)),
         atol=1e-4, rtol=1e-4)
register("special.gammainc", lambda m, a, x: m.special.gammainc(a, x), _igamma_ref,
         _two(_in(0.5, 5.0), _in(0.2, 8.0)), atol=1e-4, rtol=1e-4)
register("special.gammaincc", lambda m, a, x: m.special.gammaincc(a, x), lambda a, x: _igamma_ref(a, x, True),
         _two(_in(0.5, 5.0), _in(0.2, 8.0)), atol=1e-4, rtol=1e-4)

# ---------------------------------------------------------------- Bessel and Airy
getcontext().prec = 60
_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494")
_GAMMA = Decimal("0.57721566490153286060651209008240243104215933593992359880577")
_AI0 = Decimal("0.355028053887817239260063186004183176397979174199")
_AIP0 = Decimal("0.258819403792806798405183560189203963479091138354")


def _series(x, order, modified):
    """(J or I)_order and the (Y or K) companion sum, in Decimal."""
    q = x * x / 4 * (1 if modified else -1)
    term = Decimal(1) if order == 0 else x / 2
    j, tail = term, Decimal(0)
    h0, h1 = Decimal(0), Decimal(1)           # H_k, H_{k+1}
    tail = (h0 + h1) * term if order == 1 else Decimal(0)
    for k in range(1, 200):
        term = term * q / (k * (k + order))
        h0 += Decimal(1) / k
        h1 += Decimal(1) / (k + 1)
        j += term
        tail += (h0 if order == 0 else h0 + h1) * term
    return j, tail


def _bessel(kind, order):
    def one(v):
        x = Decimal(float(v))
        if kind in ("y", "k") and x <= 0:
            return math.nan
        j, tail = _series(x, order, kind in ("i", "k"))
        if kind == "j":
            return float(j)
        log = (x / 2).ln()
        if kind == "y" and order == 0:
            return float(2 / _PI * ((log + _GAMMA) * j - tail))
        if kind == "y":    # tail = sum (H_k + H_{k+1}) t_k; psi(k+1) + psi(k+2) = that - 2 gamma
            return float(-2 / (_PI * x) + 2 / _PI * log * j - (tail - 2 * _GAMMA * j) / _PI)
        if order == 0:     # K0 = -(ln(x/2) + gamma) I0 + sum H_k t_k
            return float(-(log + _GAMMA) * j + tail)
        return float(1 / x + log * j - (tail - 2 * _GAMMA * j) / 2)

    def ref(x):
        return np.vectorize(one, otypes=[np.float64])(x)
    return ref


def _airy_one(v):
    x = Decimal(float(v))
    c = x ** 3
    f, g = Decimal(1), x
    tf, tg = Decimal(1), x
    for k in range(1, 150):
        tf = tf * c / ((3 * k - 1) * (3 * k))
        tg = tg * c / ((3 * k) * (3 * k + 1))
        f, g = f + tf, g + tg
    return float(_AI0 * f - _AIP0 * g)


def _one_sample(make):
    def samples(dtype, rng):
        return [Sample((make(rng, (3, 4), dtype),)), Sample((make(rng, (6,), dtype),))]
    return samples


for _name, _kind, _order, _lo, _hi in (("bessel_j0", "j", 0, -25, 25), ("bessel_j1", "j", 1, -25, 25),
                                       ("bessel_y0", "y", 0, 0.1, 25), ("bessel_y1", "y", 1, 0.1, 25),
                                       ("modified_bessel_k0", "k", 0, 0.1, 12),
                                       ("modified_bessel_k1", "k", 1, 0.1, 12)):
    # PyTorch's float64 J and Y are accurate to ~1e-7 past |x| ~ 8 (tracejit's: ~1e-12
    # against the 60-digit series), under the float64 comparison's rtol: numpy's reference only
    register(f"special.{_name}", (lambda nm: lambda m, x: getattr(m.special, nm)(x))(_name), _bessel(_kind, _order),
             _one_sample(_in(_lo, _hi)), grad=False, atol=1e-5, rtol=1e-4, torch=_kind == "k")
for _name, _order in (("scaled_modified_bessel_k0", 0), ("scaled_modified_bessel_k1", 1)):
    register(f"special.{_name}", (lambda nm: lambda m, x: getattr(m.special, nm)(x))(_name),
             (lambda o: lambda x: _bessel("k", o)(x) * np.exp(x))(_order), _one_sample(_in(0.1, 12)),
             grad=False, atol=1e-5, rtol=1e-4)
register("special.airy_ai", lambda m, x: m.special.airy_ai(x), np.vectorize(_airy_one, otypes=[np.float64]),
         _one_sample(_in(-10, 5)), grad=False, atol=1e-5, rtol=1e-4)
register("special.spherical_bessel_j0", lambda m, x: m.special.spherical_bessel_j0(x),
         lambda x: np.sinc(x / np.pi), _one_sample(_in(-10, 10)), grad=False)

# ---------------------------------------------------------------- orthogonal polynomials
P = np.polynomial


def _cheb_u(x, n):
    if n < 0:
        return np.zeros_like(x)
    return sum((-1) ** k * math.comb(n - k, k) * (2 * x) ** (n - 2 * k) for k in range(n // 2 + 1))


_POLY = {
    "chebyshev_polynomial_t": lambda x, n: P.chebyshev.chebval(x, [0] * n + [1]),
    "chebyshev_polynomial_u": _cheb_u,
    "chebyshev_polynomial_v": lambda x, n: _cheb_u(x, n) - _cheb_u(x, n - 1),
    "chebyshev_polynomial_w": lambda x, n: _cheb_u(x, n) + _cheb_u(x, n - 1),
    "hermite_polynomial_h": lambda x, n: P.hermite.hermval(x, [0] * n + [1]),
    "hermite_polynomial_he": lambda x, n: P.hermite_e.hermeval(x, [0] * n + [1]),
    "laguerre_polynomial_l": lambda x, n: P.laguerre.lagval(x, [0] * n + [1]),
    "legendre_polynomial_p": lambda x, n: P.legendre.legval(x, [0] * n + [1]),
}


def _poly_samples(lo, hi):
    def samples(dtype, rng):
        return [Sample((_in(lo, hi)(rng, (3, 4), dtype),), {"n": n}) for n in (0, 1, 3, 9)]
    return samples


for _name, _ref in _POLY.items():
    register(f"special.{_name}", (lambda nm: lambda m, x, n: getattr(m.special, nm)(x, n))(_name),
             (lambda r: lambda x, n: r(x, n))(_ref), _poly_samples(-1.0, 1.0), grad=False, atol=1e-4, rtol=1e-4)
    if "chebyshev" in _name:
        register(f"special.shifted_{_name}", (lambda nm: lambda m, x, n: getattr(m.special, "shifted_" + nm)(x, n))(
            _name), (lambda r: lambda x, n: r(2 * x - 1, n))(_ref), _poly_samples(0.0, 1.0), grad=False,
            atol=1e-4, rtol=1e-4)

