"""Tests for tracejit.compiler.mathlib: accuracy against numpy over the whole
domain, numpy's special values, float32 staying float32, and vectorization.

Each (op, dtype) is compiled once per test session into a plain loop kernel
(``_kernel``), which serves both the accuracy tests and the vectorization
check.
"""
from __future__ import annotations

import functools
import itertools
import math
import re

import numpy as np
import pytest
from numba import njit

from tracejit.compiler import mathlib as M
from tracejit.compiler.mathnames import MATH

# The dispatcher of each (op, dtype), as generated kernels import it by its name
FUNCTIONS = {(op, dt): getattr(M, M.function_name(op, dt)) for op in M.OPS for dt in M.DTYPES}
#: ops that compute in pure arithmetic and vectorize (the rest call libm)
VECTORIZED = frozenset(
    [(op, "float32") for op in M.OPS if op != "erfc"]
    + [(op, "float64") for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid",
                                  "softplus")])
# Maximum error in ulps (measured: docs/design/vectorized-math.md), asserted below.
MAX_ULP = {
    ("exp", "float32"): 1.05, ("exp", "float64"): 1.1,
    ("expm1", "float32"): 1.5, ("expm1", "float64"): 1.9,
    ("log", "float32"): 0.9, ("log", "float64"): 0.95,
    ("log1p", "float32"): 1.5, ("log1p", "float64"): 1.5,
    ("tanh", "float32"): 7.0, ("tanh", "float64"): 2.6,
    ("sigmoid", "float32"): 2.45, ("sigmoid", "float64"): 2.4,
    ("softplus", "float32"): 1.75, ("softplus", "float64"): 1.8,
    ("erf", "float32"): 1.0, ("erf", "float64"): 1.0,
    ("erfc", "float32"): 0.501, ("erfc", "float64"): 1.0,
    ("sin", "float32"): 0.501, ("sin", "float64"): 1.0,
    ("cos", "float32"): 0.501, ("cos", "float64"): 1.0,
    ("pow", "float32"): 0.501, ("pow", "float64"): 1.0,
}

F32_OPS = [(op, "float32") for op in M.OPS]
F64_OPS = [(op, "float64") for op in M.OPS]
ALL_OPS = F32_OPS + F64_OPS
UNARY = [k for k in ALL_OPS if MATH[k[0]].arity == 1]
LD = np.longdouble
HAVE_LD = np.finfo(LD).nmant > 52          # x87 80-bit long double (x86 Linux)
# (without it the float64 reference is numpy's float64, itself ~0.5-1 ulp off:
#  the float64 bounds then get one ulp of slack)


# --------------------------------------------------------------------------
# helpers

_KERNELS = {}


def _kernel(op, dtype):
    """A compiled ``for i in range(n): out[i] = f(a[i] [, b[i]])`` loop."""
    key = (op, dtype)
    if key not in _KERNELS:
        fn = FUNCTIONS[key]
        if MATH[op].arity == 2:
            @njit(error_model="numpy", cache=False)
            def k2(a, b, out):
                for i in range(a.shape[0]):
                    out[i] = fn(a[i], b[i])
            k = k2
        else:
            @njit(error_model="numpy", cache=False)
            def k1(a, out):
                for i in range(a.shape[0]):
                    out[i] = fn(a[i])
            k = k1
        _KERNELS[key] = k
    return _KERNELS[key]


def run(op, dtype, *args):
    args = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    out = np.empty_like(args[0])
    _kernel(op, dtype)(*args, out)
    return out


def ulp_error(y, ref, dtype):
    """|y - ref| in ulps of ``dtype`` at ref (ref in float64 for float32
    results, long double for float64).  nan vs nan and inf vs an overflowing
    ref count as exact; a nan or inf mismatch is inf."""
    fi = np.finfo(dtype)
    rt = ref.dtype.type
    y = y.astype(ref.dtype)
    a = np.abs(ref)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.where(np.isfinite(a) & (a > 0), a, rt(1)))
        e = np.maximum(e - 1, fi.minexp)
        ulp = np.ldexp(rt(1), (e - fi.nmant).astype(np.int32))
        err = np.abs(y - ref) / ulp
    half_ulp_max = np.ldexp(rt(1), fi.maxexp - 2 - fi.nmant)
    ovf = a >= rt(fi.max) + half_ulp_max                    # rounds to inf
    err = np.where(ovf, np.where(y == np.copysign(rt(np.inf), ref), 0.0, np.inf), err)
    err = np.where(np.isinf(y) & ~ovf, np.inf, err)
    nr, ny = np.isnan(ref), np.isnan(y)
    err = np.where(nr | ny, np.where(nr & ny, 0.0, np.inf), err)
    return err.astype(np.float64)


def specials(dtype):
    fi = np.finfo(dtype)
    t = np.dtype(dtype).type
    v = [0.0, np.inf, np.nan, fi.smallest_subnormal, fi.smallest_normal,
         fi.smallest_normal - fi.smallest_subnormal, fi.max, fi.eps, 1.0, 0.5, 2.0, 1e-5,
         np.nextafter(t(1), t(2)), np.nextafter(t(1), t(0))]
    v = np.array(v, dtype=dtype)
    return np.concatenate([v, -v])


@functools.lru_cache(maxsize=None)
def sample(dtype, n=200_000, seed=0):
    """Dense sample of the whole domain: log-spaced magnitudes of both signs
    from the smallest subnormal to the largest float, uniform on the ranges
    where the functions change, random bit patterns, special values."""
    rng = np.random.default_rng(seed)
    fi = np.finfo(dtype)
    lo, hi = math.log10(float(fi.smallest_subnormal)), math.log10(float(fi.max))
    sign = rng.choice([-1.0, 1.0], n)
    parts = [
        sign * 10.0 ** rng.uniform(lo, hi, n),
        rng.uniform(-1.0, 1.0, n // 2),
        rng.uniform(-12.0, 12.0, n // 2),
        rng.uniform(-110.0, 110.0, n // 4) if dtype == "float32"
        else rng.uniform(-750.0, 750.0, n // 4),
    ]
    x = np.concatenate(parts).astype(dtype)
    with np.errstate(all="ignore"):
        if dtype == "float32":
            bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        else:
            bits = rng.integers(0, 2**63, n, dtype=np.uint64).view(np.float64) * sign
    x = np.concatenate([x, bits.astype(dtype), specials(dtype)])
    x.setflags(write=False)
    return x


@njit(cache=False)
def _erf_ref(x):
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = math.erf(x[i])
    return out


def _erfc_ref(x):
    return np.asarray(np.frompyfunc(math.erfc, 1, 1)(x.astype(np.float64)), np.float64)


def reference(op, x, dtype):
    """float64 (for float32) or long double (for float64) reference values."""
    with np.errstate(all="ignore"):
        w = x.astype(LD if (dtype == "float64" and HAVE_LD) else np.float64)
        if op == "sigmoid":
            e = np.exp(-np.abs(w))
            return np.where(w >= 0, 1 / (1 + e), e / (1 + e))
        if op == "softplus":
            return np.logaddexp(w.dtype.type(0), w)
        if op == "erf":
            return _erf_ref(x.astype(np.float64)).astype(w.dtype)
        if op == "erfc":
            return _erfc_ref(x).astype(w.dtype)
        return getattr(np, op)(w)


def numpy_special(op, x):
    """numpy's value at special points (same dtype)."""
    with np.errstate(all="ignore"):
        if op == "sigmoid":
            return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype)
        if op == "softplus":
            return np.logaddexp(x.dtype.type(0), x)
        if op == "erf":
            return _erf_ref(x.astype(np.float64)).astype(x.dtype)
        if op == "erfc":
            return _erfc_ref(x).astype(x.dtype)
        return getattr(np, op)(x)


# --------------------------------------------------------------------------
# API

def test_registry():
    assert set(FUNCTIONS) == {(op, dt) for op in M.OPS for dt in M.DTYPES}
    assert M.function_name("tanh", "float32") == "tanh_f32"
    assert M.function_name("exp", np.dtype("float64")) == "exp_f64"
    for (op, dt), fn in FUNCTIONS.items():
        assert getattr(M, M.function_name(op, dt)) is fn
        assert (op, dt) in MAX_ULP
    with pytest.raises(KeyError):
        M.function_name("nope", "float32")
    with pytest.raises(KeyError):
        M.function_name("exp", "int32")
    src = "from tracejit.compiler.mathlib import tanh_f32, exp_f32\n"
    ns = {}
    exec(src, ns)
    assert ns["tanh_f32"] is M.tanh_f32


def test_cores_are_inlined_not_compiled_on_their_own():
    """The shared cores (exp's, expm1's, log's tail) are numba-IR inlined into the functions
    that call them: a kernel reaching exp/log/sigmoid/... compiles no function for a core."""
    from tracejit.compiler import math_exp_log as EL
    for op in ("exp", "expm1", "log", "log1p", "sigmoid", "softplus", "erf"):
        for dt in ("float32", "float64"):
            out = run(op, dt, np.array([0.5, 3.0, 1.0], dt))
            assert np.isfinite(out).all()
    cores = [EL._exp_core_f32, EL._expm1_core_f32, EL._log_tail_f32, EL._exp_core_f64,
             EL._expm1_core_f64, EL._log_tail_f64]
    assert [c.py_func.__name__ for c in cores if c.signatures] == []
    # and the values are the cores': exp, log, sigmoid as numpy gives them (to ~1 ulp)
    x = np.array([0.5, -3.0, 20.0], np.float32)
    np.testing.assert_allclose(run("exp", "float32", x), np.exp(x), rtol=2.4e-7)
    np.testing.assert_allclose(run("log", "float64", np.array([0.5, 3.0])), np.log([0.5, 3.0]), rtol=3e-16)
    np.testing.assert_allclose(run("sigmoid", "float32", x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=3e-7)


# --------------------------------------------------------------------------
# dtype: float32 stays float32

@pytest.mark.parametrize("op,dtype", ALL_OPS)
def test_result_dtype(op, dtype):
    t = np.dtype(dtype).type
    args = [np.ones(4, dtype) * t(0.75)] * MATH[op].arity
    out = run(op, dtype, *args)
    fn = FUNCTIONS[(op, dtype)]
    sig = [s for s in fn.nopython_signatures if str(s.args[0]) == dtype][0]
    assert str(sig.return_type) == dtype
    assert out.dtype == np.dtype(dtype)


F32_PURE = [k for k in F32_OPS if k[0] not in ("sin", "cos", "pow", "erfc")]


@pytest.mark.parametrize("op,dtype", F32_PURE)
def test_no_float64_in_float32_ir(op, dtype):
    """All arithmetic of the float32 functions is float32 (sin/cos/pow/erfc are
    documented to compute internally in float64)."""
    fn = FUNCTIONS[(op, dtype)]
    run(op, dtype, np.ones(2, dtype))
    sig = [s for s in fn.nopython_signatures if str(s.args[0]) == dtype][0]
    ir = fn.inspect_llvm(sig.args)
    # native bodies only (not the CPython boxing wrapper, which uses double)
    bodies = re.findall(r"define [^\n]*@_ZN\d+tracejit[^\n]*\{\n(.*?)\n\}", ir, re.S)
    assert bodies
    for body in bodies:
        assert "double" not in body and "fpext" not in body, op


# --------------------------------------------------------------------------
# vectorization

@pytest.mark.parametrize("op,dtype", sorted(VECTORIZED))
def test_vectorizes(op, dtype):
    args = [np.ones(8, dtype)] * MATH[op].arity
    run(op, dtype, *args)
    k = _kernel(op, dtype)
    ir = k.inspect_llvm(k.signatures[0])
    kern = [b for b in re.findall(r"define [^\n]*\{\n(.*?)\n\}", ir, re.S)
            if "vector.body" in b]
    assert kern, "the loop over %s_%s was not vectorized" % (op, dtype)
    elt = "float" if dtype == "float32" else "double"
    assert re.search(r"<\d+ x %s>" % elt, kern[0])
    calls = re.findall(r"call [^\n]*@(\S+)\(", kern[0])
    assert not [c for c in calls if "mathlib" in c], calls


# --------------------------------------------------------------------------
# accuracy over the whole domain

@pytest.mark.parametrize("op,dtype", UNARY)
def test_accuracy_unary(op, dtype):
    x = sample(dtype)
    y = run(op, dtype, x)
    err = ulp_error(y, reference(op, x, dtype), dtype)
    bound = MAX_ULP[(op, dtype)] + (1.0 if dtype == "float64" and not HAVE_LD else 0.0)
    i = int(np.argmax(err))
    assert err[i] <= bound, "%s_%s(%r) = %r: %.3f ulp > %s" % (op, dtype, x[i], y[i], err[i], bound)


def _pow_sample(dtype, n=150_000, seed=1):
    rng = np.random.default_rng(seed)
    fi = np.finfo(dtype)
    hi = math.log10(float(fi.max))
    x = np.concatenate([10.0 ** rng.uniform(-hi, hi, n), rng.uniform(0, 4, n),
                        1 + rng.uniform(-1e-3, 1e-3, n)])
    y = np.concatenate([rng.uniform(-8, 8, n), rng.uniform(-120, 120, n),
                        rng.uniform(-1e4, 1e4, n)])
    xi = -10.0 ** rng.uniform(-5, 5, n)                 # negative base, integer exponent
    yi = rng.integers(-30, 30, n).astype(np.float64)
    return (np.concatenate([x, xi]).astype(dtype), np.concatenate([y, yi]).astype(dtype))


@pytest.mark.parametrize("dtype", M.DTYPES)
def test_accuracy_pow(dtype):
    x, y = _pow_sample(dtype)
    out = run("pow", dtype, x, y)
    w = LD if (dtype == "float64" and HAVE_LD) else np.float64
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(w), y.astype(w))
    err = ulp_error(out, ref, dtype)
    i = int(np.argmax(err))
    assert err[i] <= MAX_ULP[("pow", dtype)], (x[i], y[i], out[i], ref[i], err[i])


# --------------------------------------------------------------------------
# special values: exactly numpy's (nan, +-inf, signed zeros)

def _same(a, b):
    return (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))


@pytest.mark.parametrize("op,dtype", UNARY)
def test_special_values(op, dtype):
    fi = np.finfo(dtype)
    base = np.array([0.0, np.inf, np.nan, fi.max, fi.smallest_subnormal, fi.smallest_normal,
                     1e30, 1e-30 if dtype == "float64" else 1e-38, 1.0], dtype)
    x = np.concatenate([base, -base])
    y = run(op, dtype, x)
    ref = numpy_special(op, x)
    ok = _same(y, ref)
    # finite non-special results may differ by rounding: allow the ulp bound there
    close = np.isfinite(ref) & (ref != 0) & np.isfinite(y) & (np.sign(y) == np.sign(ref)) & \
        (ulp_error(y, reference(op, x, dtype), dtype) <= MAX_ULP[(op, dtype)])
    bad = ~(ok | close)
    assert not bad.any(), list(zip(x[bad], y[bad], ref[bad]))
    # signed zero and nan are returned exactly as numpy does
    z = np.array([0.0, -0.0, np.nan], dtype)
    assert _same(run(op, dtype, z), numpy_special(op, z)).all()


@pytest.mark.parametrize("dtype", M.DTYPES)
def test_limits(dtype):
    """Overflow to inf, underflow to 0, saturation, exact values."""
    t = np.dtype(dtype).type
    big = t(1e30) if dtype == "float32" else t(1e300)
    ex = lambda op, v: run(op, dtype, np.array([v], dtype))[0]  # noqa: E731
    assert ex("exp", t(89.0) if dtype == "float32" else t(710.0)) == np.inf
    assert ex("exp", t(-104.0) if dtype == "float32" else t(-746.0)) == 0.0
    assert 0 < ex("exp", t(-103.0) if dtype == "float32" else t(-744.0)) < np.finfo(dtype).smallest_normal
    assert ex("exp", t(0)) == 1.0
    assert ex("expm1", -big) == -1.0 and ex("expm1", big) == np.inf
    assert ex("tanh", big) == 1.0 and ex("tanh", -big) == -1.0
    assert ex("tanh", t(20)) == 1.0 and ex("tanh", t(-20)) == -1.0
    assert ex("sigmoid", -big) == 0.0 and ex("sigmoid", big) == 1.0
    assert ex("sigmoid", t(0)) == 0.5
    assert ex("softplus", big) == big and ex("softplus", -big) == 0.0
    assert ex("erf", big) == 1.0 and ex("erf", -big) == -1.0
    assert ex("log", t(1)) == 0.0 and ex("log1p", t(-1)) == -np.inf
    assert math.isnan(ex("log", t(-1))) and math.isnan(ex("log1p", t(-2)))
    assert ex("sin", t(0)) == 0.0 and ex("cos", t(0)) == 1.0
    sub = np.finfo(dtype).smallest_subnormal
    for op in ("expm1", "log1p", "tanh", "sin", "erf"):    # f(x) ~ x (erf: 1.13x rounds to x)
        assert ex(op, t(sub)) == t(sub) and ex(op, -t(sub)) == -t(sub), op


def test_tanh_f32_saturates_exactly_and_is_identity_near_zero():
    """The rational tanh reaches exactly +-1 where float32 tanh does, never
    exceeds it just below, is odd, and returns x itself where tanh(x) rounds
    to x."""
    t = np.float32
    from tracejit.compiler.math_tanh_erf import _TANH_SAT32 as sat
    below = np.array([sat], t)
    for _ in range(2000):                       # the last 2000 floats before saturation
        below = np.append(below, np.nextafter(below[-1], t(0)))
    top = np.linspace(7.0, float(sat), 300_001).astype(t)       # where rounding could pass 1
    x = np.concatenate([below, top, [sat, t(9.5), t(1e4)]]).astype(t)
    y = run("tanh", "float32", x)
    assert y[0] == 1.0 and (y[-3:] == 1.0).all()
    assert (y <= 1.0).all()
    assert (run("tanh", "float32", -x) == -y).all()
    # np.tanh agrees: sat is the first float32 whose tanh rounds to 1
    assert t(np.tanh(np.float64(sat))) == 1.0 > t(np.tanh(np.float64(below[1])))
    tiny = (10.0 ** np.linspace(-38, -4, 5000)).astype(t)
    assert (run("tanh", "float32", tiny) == tiny).all()
    assert (run("tanh", "float32", -tiny) == -tiny).all()


def _tanh_f32_two_sided():
    """tanh_f32 in its two-sided form: clamps of x and of the result to
    [-SAT, SAT] and [-1, 1] (two-sided), x*P/Q on x itself."""
    from tracejit.compiler import math_tanh_erf as T
    from tracejit.compiler.mathbits import _JIT, _ONE32

    sat, p1, p2, p3, p4, p5 = (T._TANH_SAT32, T._TP32_1, T._TP32_2, T._TP32_3, T._TP32_4,
                               T._TP32_5)
    q1, q2, q3 = T._TQ32_1, T._TQ32_2, T._TQ32_3

    @njit(**_JIT)
    def old(x):
        xc = sat if x > sat else x
        xc = -sat if xc < -sat else xc
        t = xc * xc
        p = _ONE32 + t * (p1 + t * (p2 + t * (p3 + t * (p4 + t * p5))))
        q = _ONE32 + t * (q1 + t * (q2 + t * q3))
        r = xc * p / q
        r = _ONE32 if r > _ONE32 else r
        return -_ONE32 if r < -_ONE32 else r

    @njit(error_model="numpy", cache=False)
    def k(a, out):
        for i in range(a.shape[0]):
            out[i] = old(a[i])
    return k


def test_tanh_f32_one_sided_clamps_give_the_two_sided_bits():
    """tanh_f32 clamps |x| and the result on one side each, then takes x's sign (fewer
    instructions): every float32 gives the bits the two-sided form gave. Swept: every
    97th bit pattern (44M inputs over both signs: zeros, subnormals, normals, inf, nan)
    and every float in [7, 9.5], where the result clamp acts."""
    t = np.float32
    every = np.arange(0, 1 << 32, 97, dtype=np.uint64).astype(np.uint32).view(t)
    lo, hi = np.array([7.0, 9.5], t).view(np.uint32)
    top = np.arange(lo, hi + 1, dtype=np.uint32).view(t)
    special = np.array([0.0, np.inf, np.nan, 9.010913848876953, 1e-45, 1.0], t)
    x = np.concatenate([every, top, -top, special, -special])
    y = run("tanh", "float32", x)
    old = np.empty_like(x)
    _tanh_f32_two_sided()(x, old)
    nan = np.isnan(old)
    assert (np.isnan(y) == nan).all()
    assert (y.view(np.uint32)[~nan] == old.view(np.uint32)[~nan]).all()
    assert np.signbit(run("tanh", "float32", np.array([-0.0], t)))[0]


# --------------------------------------------------------------------------
# pow special cases: numpy (C99) rules

def test_pow_special_grid():
    for dtype in M.DTYPES:
        v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0,
                      -3.0, 2.5, -2.5, 1e-40 if dtype == "float32" else 1e-310, 1e38, -1e38,
                      16777217.0, 16777216.0, -16777215.0, 0.999999, 1.0000001], dtype)
        a, b = np.array(list(itertools.product(v, v)), dtype=dtype).T
        out = run("pow", dtype, a, b)
        with np.errstate(all="ignore"):
            ref = np.power(a, b)
        ok = _same(out, ref) | (np.isfinite(ref) & (ulp_error(out, ref.astype(
            np.float64 if dtype == "float32" else LD), dtype) <= 1))
        assert ok.all(), list(zip(a[~ok], b[~ok], out[~ok], ref[~ok]))


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sincos_huge_arguments(op):
    """float32 sin/cos use an exact reduction: correct for any finite input."""
    rng = np.random.default_rng(3)
    x = (10.0 ** rng.uniform(4, 38.5, 100_000) * rng.choice([-1, 1], 100_000)).astype(np.float32)
    # multiples of pi/2 rounded to float32: the worst cases for the reduction
    x = np.concatenate([x, (np.arange(1, 20000) * (np.pi / 2)).astype(np.float32),
                        np.array([1.6263942e25, 2.3810547e25, 3.3940617e38], np.float32)])
    y = run(op, "float32", x)
    err = ulp_error(y, getattr(np, op)(x.astype(np.float64)), "float32")
    assert err.max() <= MAX_ULP[(op, "float32")]
