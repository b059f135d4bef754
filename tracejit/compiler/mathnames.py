"""Names of `mathlib`'s scalar functions, without importing numba.

The code generator only needs the names to write ``from tracejit.compiler.mathlib import
tanh_f32``; importing `mathlib` itself imports numba (half a second) and defines ~40 numba
functions. A background compile generates kernel sources in the calling process while
workers compile them, so generation must not pay that import (compiler/tiers.py).
"""
from __future__ import annotations

__all__ = ["OPS", "DTYPES", "function_name"]

OPS = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "softplus", "erf",
       "sin", "cos", "pow")
DTYPES = ("float32", "float64")
_SUFFIX = {"float32": "f32", "float64": "f64"}


def function_name(op: str, dtype: str) -> str:
    """Global name in `mathlib` of the scalar function for ``op`` on ``dtype``,
    e.g. ``function_name('tanh', 'float32') == 'tanh_f32'``.  KeyError if absent."""
    dtype = str(getattr(dtype, "name", dtype))
    if op not in OPS or dtype not in _SUFFIX:
        raise KeyError((op, dtype))
    return "%s_%s" % (op, _SUFFIX[dtype])
