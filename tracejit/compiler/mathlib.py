"""Vectorizable scalar math functions for generated numba kernels.

Why this module exists
----------------------
numba lowers ``math.exp``/``math.tanh``/... to calls into the C library.
Without Intel SVML those calls are scalar, so a loop that contains one cannot
be vectorized: a GELU over 4M float32 takes ~60 ms with ``math.tanh`` but
~2 ms with the pure-arithmetic ``tanh_f32`` below.  A second trap is that
float literals in numba code are float64, so ``x * 0.5`` silently promotes a
float32 ``x`` to float64.  Every function here

* is written only with arithmetic, comparisons turned into selects, and
  integer bit manipulation on the float's bit pattern (no data-dependent
  early return, no table lookups, no libm calls), and is marked LLVM
  ``alwaysinline``, so it is inlined into the caller's loop, which LLVM then
  vectorizes (the tests check for a vectorized loop without calls in the
  LLVM IR of a kernel using each function);
* keeps float32 in float32 (all constants are typed module-level numpy
  scalars; the tests check the compiled signature and the LLVM IR);
  ``sin_f32``/``cos_f32``/``pow_f32`` are the deliberate exception: they
  compute internally in float64 and round once at the end;
* handles the whole domain with numpy's special values: +-inf, nan, +-0
  (sign kept where numpy keeps it), subnormal inputs and outputs, overflow to
  inf, underflow to 0.

How to use it (code generator)
------------------------------
``FUNCTIONS[(op, dtype)]`` is the numba dispatcher and ``function_name(op,
dtype)`` its global name in this module, e.g. ``'tanh_f32'``; a generated
kernel does ``from tracejit.compiler.mathlib import tanh_f32`` and calls
``tanh_f32(v)`` on a scalar of exactly that dtype (cast first: pass
``np.float32`` values to ``*_f32``).  ``pow_*`` takes two arguments ``(x, y)``,
everything else one.  The functions are compiled with
``error_model='numpy'`` and ``fastmath={'contract'}`` (FMA contraction only:
nan/inf semantics are untouched).  They are not numba-IR inlined
(``inline='never'``, the default) but carry the LLVM ``alwaysinline``
attribute (set by the ``_always_inline()`` intrinsic), so after linking LLVM
inlines them into the kernel *with their own instruction flags*, whatever
flags the kernel uses.  The calling kernel should use ``error_model='numpy'``
itself (the division checks of the 'python' model block vectorization of the
kernel's own code) and must not use the ``fastmath`` flags ``nnan``/``ninf``
if inf/nan are to survive its own arithmetic.  ``cache=True`` on the kernel
works, but numba does not notice when these files change: the disk cache's key
covers them (see "Where the functions live").  Arguments must already have the function's dtype (cast
with ``np.float32(...)`` in generated code); most ``*_f32`` functions refuse
a float64 argument at typing time.
Integer powers with constant exponents should still be emitted as
multiplications by the code generator; ``pow_*`` is the general ``x**y``.

Accuracy (measured)
-------------------
Errors are in ulps of the result's dtype, against a reference evaluated in
higher precision on the same inputs: numpy float64 (``np.exp`` etc. on the
float32 input cast up; libm ``erf`` for erf) for the float32 functions, and
numpy long double (x87 80-bit: ``expl``, ``log1pl``, ...) for the float64
ones.  The ulp is that of the reference (2**-149 / 2**-1074 in the subnormal
range); an inf result where the reference rounds to inf counts as exact.

* float32, unary functions: maximum over **all 2**32 float32 inputs**
  (exhaustive, including subnormals, +-inf and every nan).
* float32 pow: 6.4e7 random pairs (log-uniform |x| over the whole range and
  y in +-10, x in [0, 4] with y in +-200, x near 1 with y in +-2e4, negative
  x with integer y) plus the full special-value grid (exact numpy match).
* float64: ~4.2e7 points per function (log-uniform magnitudes of both signs
  from 1e-323 to 1.8e308, uniform on [-1, 1], [-40, 40], [-750, 750], near 1,
  near -1, around the overflow/underflow thresholds) plus special values.

==========  ====================  ====================  ======================
function    float32 max error     float64 max error     float64 rel. error
==========  ====================  ====================  ======================
exp         1.01 ulp              1.04 ulp              2.3e-16
expm1       1.45 ulp              1.85 ulp              4.1e-16
log         0.85 ulp              0.92 ulp              2.1e-16
log1p       1.44 ulp              1.48 ulp              3.3e-16
tanh        6.98 ulp              2.55 ulp              5.7e-16
sigmoid     2.41 ulp              2.33 ulp              5.2e-16
softplus    1.71 ulp              1.76 ulp              3.9e-16
erf         0.99 ulp (abs 6e-8)   libm ``math.erf``     (not vectorized)
sin         0.50 ulp (any x)      libm ``math.sin``     (not vectorized)
cos         0.50 ulp (any x)      libm ``math.cos``     (not vectorized)
pow         0.50 ulp              libm ``pow``          (not vectorized)
==========  ====================  ====================  ======================

For comparison numpy's own float32 ``np.sin``/``np.cos`` are off by up to
1.4 ulp and ``np.power`` by 0.52 ulp on the same samples.  1 float32 ulp is a
relative error of at most 1.19e-7, so every float32 function but tanh is within
3e-7 relative error (erf: absolute error below 6e-8; tanh: 4.2e-7, see below).  ``MAX_ULP`` holds these
bounds (rounded up) and the tests assert them on a dense sample.

``sigmoid(x) = 1/(1+exp(-x))`` (reference computed as ``exp(x)/(1+exp(x))``
for x<0 in float64), ``softplus(x) = log(1+exp(x))`` (reference
``np.logaddexp(0, x)``).  The float64 erf/sin/cos/pow call the C library
(correct and fully accurate, but scalar): a vectorizable float64 erf needs
several piecewise approximations, sin/cos need a 2**1024-range Payne-Hanek
reduction and pow a double-double log; not worth it for float64 which is
rarely the hot dtype here.

Where the functions live
------------------------
This module is the one place generated kernels import from and holds the tables
below; the functions are defined, with their algorithms in each module's
docstring, in:

* ``math_exp_log.py``: exp, expm1, log, log1p (and the cores the others use);
* ``math_tanh_erf.py``: tanh, sigmoid, softplus, erf;
* ``math_trig_pow.py``: sin, cos, pow;
* ``mathbits.py``: the numba options, bit-cast intrinsics, ``_always_inline``
  and shared constants.

Coefficients are our own minimax fits made with a Remez exchange in mpmath,
then rounded to the working precision.  A kernel cached on disk bakes in the
code of every function it calls, so the disk cache's key hashes every tracejit
module a kernel's source reaches through imports, transitively (see
diskcache.py): an edit in any of these files gives new keys.
"""
from __future__ import annotations

import hashlib
import sys

from . import math_exp_log, math_tanh_erf, math_trig_pow, mathbits
from .math_exp_log import (exp_f32, exp_f64, expm1_f32, expm1_f64, log1p_f32, log1p_f64,
                           log_f32, log_f64)
from .math_tanh_erf import (erf_f32, erf_f64, sigmoid_f32, sigmoid_f64, softplus_f32,
                            softplus_f64, tanh_f32, tanh_f64)
from .math_trig_pow import cos_f32, cos_f64, pow_f32, pow_f64, sin_f32, sin_f64
from .mathbits import _always_inline  # noqa: F401  (the CPU renderer's element helper calls it)
from . import bf16math
from .bf16math import bf16_to_f32, f32_to_bf16  # noqa: F401  (bf16 loads and stores, Emitter.cast)
# The names live in a numba-free module so that code generation need not import numba.
from .mathnames import DTYPES, OPS, function_name


# ==========================================================================
# Registry used by the code generator
# ==========================================================================
#: ops that compute in pure arithmetic and vectorize (the rest call libm)
VECTORIZED = frozenset(
    [(op, "float32") for op in OPS]
    + [(op, "float64") for op in ("exp", "expm1", "log", "log1p", "tanh", "sigmoid",
                                  "softplus")])
#: number of arguments of each op
ARITY = {op: (2 if op == "pow" else 1) for op in OPS}


FUNCTIONS = {(op, dt): globals()[function_name(op, dt)] for op in OPS for dt in DTYPES}

#: Documented maximum error in ulps (see the module docstring for how it was
#: measured); the tests assert these bounds.
MAX_ULP = {
    ("exp", "float32"): 1.05, ("exp", "float64"): 1.1,
    ("expm1", "float32"): 1.5, ("expm1", "float64"): 1.9,
    ("log", "float32"): 0.9, ("log", "float64"): 0.95,
    ("log1p", "float32"): 1.5, ("log1p", "float64"): 1.5,
    ("tanh", "float32"): 7.0, ("tanh", "float64"): 2.6,
    ("sigmoid", "float32"): 2.45, ("sigmoid", "float64"): 2.4,
    ("softplus", "float32"): 1.75, ("softplus", "float64"): 1.8,
    ("erf", "float32"): 1.0, ("erf", "float64"): 1.0,
    ("sin", "float32"): 0.501, ("sin", "float64"): 1.0,
    ("cos", "float32"): 0.501, ("cos", "float64"): 1.0,
    ("pow", "float32"): 0.501, ("pow", "float64"): 1.0,
}

#: Hash of this file and the files its functions are defined in.  numba's
#: ``cache=True`` only looks at the *kernel's* source, so a kernel cached on disk
#: keeps the old inlined copy of these functions after they change (diskcache's
#: key hashes these files, and what they import, for that reason).
_h = hashlib.sha256()
for _m in (sys.modules[__name__], mathbits, math_exp_log, math_tanh_erf, math_trig_pow, bf16math):
    with open(_m.__file__, "rb") as _f:
        _h.update(_f.read())
SOURCE_HASH = _h.hexdigest()[:16]
del _h, _m, _f

__all__ = ["FUNCTIONS", "function_name", "OPS", "DTYPES", "VECTORIZED", "ARITY", "MAX_ULP",
           "SOURCE_HASH", "bf16_to_f32", "f32_to_bf16"] + \
    sorted(function_name(op, dt) for op in OPS for dt in DTYPES)
