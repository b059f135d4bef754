"""Vectorizable scalar math functions for generated numba kernels (design:
docs/design/vectorized-math.md, with the measured accuracy).

A kernel imports ``function_name(op, dtype)`` (``tanh_f32``) and calls it on a scalar of
exactly that dtype; ``pow_*`` takes ``(x, y)``. The functions are inlined with their own
flags; the caller should use ``error_model='numpy'`` and no ``nnan``/``ninf`` fastmath if
inf/nan are to survive its own arithmetic.
"""
from __future__ import annotations

# (the functions generated kernels import from here by name: __all__)
from .math_exp_log import (exp_f32, exp_f64, expm1_f32, expm1_f64, log1p_f32, log1p_f64,  # noqa: F401
                           log_f32, log_f64)
from .math_tanh_erf import (erf_f32, erf_f64, erfc_f32, erfc_f64, sigmoid_f32, sigmoid_f64,  # noqa: F401
                            softplus_f32, softplus_f64, tanh_f32, tanh_f64)
from .math_trig_pow import cos_f32, cos_f64, pow_f32, pow_f64, sin_f32, sin_f64  # noqa: F401
from .mathbits import _always_inline  # noqa: F401  (the CPU renderer's element helper calls it)
from .bf16math import bf16_to_f32, f32_to_bf16  # noqa: F401  (bf16 loads and stores, Emitter.cast)
# The names live in a numba-free module so that code generation need not import numba.
from .mathnames import DTYPES, OPS, function_name


__all__ = ["function_name", "OPS", "DTYPES", "bf16_to_f32", "f32_to_bf16"] + \
    sorted(function_name(op, dt) for op in OPS for dt in DTYPES)
