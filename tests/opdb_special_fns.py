"""Op records for tracejit/ops/special_fns.py: polygamma of any order and the modified
Bessel functions. References are independent of the implementation: polygamma as its
defining series summed directly, the Bessel functions as their integral
I_n(x) = (1/pi) int_0^pi exp(x cos t) cos(n t) dt by the trapezoid rule (exact to
rounding for this periodic integrand)."""
from __future__ import annotations

import math

import numpy as np

from opdb import FLOATS, Sample, register


def _in(lo, hi):
    def make(rng, shape, dtype):
        return np.asarray(rng.uniform(lo, hi, shape), dtype.np)
    return make


def _polygamma_ref(x, n):
    k = np.arange(200000, dtype=np.float64)
    x = np.asarray(x, np.float64)
    s = (1.0 / (x[..., None] + k) ** (n + 1)).sum(-1)
    s = s + (x + k[-1] + 0.5) ** -n / n    # the series' tail as its integral
    return (-1) ** (n + 1) * math.factorial(n) * s


def _bessel_ref(order, scaled):
    t = np.linspace(0.0, np.pi, 4001)

    def ref(x):
        x = np.asarray(x, np.float64)
        shift = np.abs(x)[..., None] if scaled else 0.0
        f = np.exp(x[..., None] * np.cos(t) - shift) * np.cos(order * t)
        return np.trapezoid(f, t, axis=-1) / np.pi
    return ref


def _samples(make, **kw):
    def samples(dtype, rng):
        return [Sample((make(rng, shape, dtype),), dict(kw)) for shape in ((3, 4), (5,), ())]
    return samples


for _n in (1, 2, 3):
    register(f"polygamma{_n}", lambda m, x, n: m.polygamma(n, x), _polygamma_ref,
             _samples(_in(0.4, 5.0), n=_n), dtypes=FLOATS, atol=1e-3, rtol=1e-4)

for _name, _order, _scaled in (("i0", 0, False), ("i1", 1, False), ("i0e", 0, True), ("i1e", 1, True)):
    register(_name, (lambda nm: lambda m, x: getattr(m.special, nm)(x))(_name), _bessel_ref(_order, _scaled),
             _samples(_in(-4.0, 4.0)), dtypes=FLOATS, atol=1e-4, rtol=1e-4)
