"""The one list of math functions a kernel may call, and how each backend provides them.

A primitive's scalar rule asks its emitter for a math function by name
(``e.call("tanh", a)``); `MATH` says, for every name, how each backend spells it:

- the CPU backend calls `mathlib`'s vectorizable ``<name>_f32``/``<name>_f64`` (numba
  without SVML calls scalar libm for ``math.tanh``, which blocks vectorization), or a
  numba builtin that LLVM lowers to an intrinsic (``math.sqrt``, ``np.floor``);
- the CUDA backend calls numba's ``math`` function, which on the device is a libdevice
  call picked by the argument type (``__nv_tanhf``), and under numba's CUDA simulator
  numpy's ufunc (same special values, no Python exceptions); or, where libdevice has no
  such function, the function's `formula` written with other entries of this table.

`FORMULAS` holds those formulas (the numerically stable sigmoid and softplus: ``exp``
only ever sees a non-positive argument, so nothing overflows). `mathlib`'s own
``sigmoid_f32``/``sigmoid_f64`` compute the same formula; the eager implementation
(ops/elementwise.py) too.

This module imports nothing heavy: generating a kernel's source (in a background
compile, before any worker finished) must not pay numba's import, which importing
`mathlib` does.

To add a math function: a row in `MATH`; for the CPU backend its ``*_f32``/``*_f64``
in `mathlib` (or a builtin spelling), for CUDA a libdevice name or a formula.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["MathFn", "MATH", "FORMULAS", "OPS", "DTYPES", "function_name"]


@dataclass(frozen=True)
class MathFn:
    arity: int
    cpu: str                        # "mathlib", or the numba builtin to call ("math.sqrt")
    cuda: str                       # "libdevice" (numba's math.<name>) or "formula"
    ufunc: Optional[str] = None     # numpy's spelling, bound under the CUDA simulator
    integer_identity: bool = False  # on an integer the function is the identity (floor)


MATH: dict = {
    "exp": MathFn(1, "mathlib", "libdevice", "np.exp"),
    "expm1": MathFn(1, "mathlib", "libdevice", "np.expm1"),
    "log": MathFn(1, "mathlib", "libdevice", "np.log"),
    "log1p": MathFn(1, "mathlib", "libdevice", "np.log1p"),
    "tanh": MathFn(1, "mathlib", "libdevice", "np.tanh"),
    "sigmoid": MathFn(1, "mathlib", "formula"),
    "softplus": MathFn(1, "mathlib", "formula"),
    "erf": MathFn(1, "mathlib", "libdevice", None),     # numpy has no erf ufunc: math.erf, typed
    "sin": MathFn(1, "mathlib", "libdevice", "np.sin"),
    "cos": MathFn(1, "mathlib", "libdevice", "np.cos"),
    "pow": MathFn(2, "mathlib", "libdevice", "np.power"),
    "sqrt": MathFn(1, "math.sqrt", "libdevice", "np.sqrt"),
    "floor": MathFn(1, "np.floor", "libdevice", "np.floor", integer_identity=True),
    "fmod": MathFn(2, "np.fmod", "libdevice", "np.fmod"),   # (exact, unlike a - trunc(a/b)*b)
}


def _sigmoid(e, x: str) -> str:
    # 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise, with t = e^-|x| in [0, 1] in both.
    one, zero = e.const(1), e.const(0)
    t = e.call("exp", f"-abs({x})")
    return f"(({one} if {x} >= {zero} else {t}) / ({one} + {t}))"


def _softplus(e, x: str) -> str:
    # max(x, 0) + log1p(e^-|x|)
    zero = e.const(0)
    return f"(({x} if {x} > {zero} else {zero}) + {e.call('log1p', e.call('exp', f'-abs({x})'))})"


FORMULAS: dict[str, Callable] = {"sigmoid": _sigmoid, "softplus": _softplus}

# mathlib's functions: one per (op, dtype).
OPS = tuple(name for name, fn in MATH.items() if fn.cpu == "mathlib")
DTYPES = ("float32", "float64")
_SUFFIX = {"float32": "f32", "float64": "f64"}


def function_name(op: str, dtype: str) -> str:
    """Global name in `mathlib` of the scalar function for ``op`` on ``dtype``,
    e.g. ``function_name('tanh', 'float32') == 'tanh_f32'``.  KeyError if absent."""
    dtype = str(getattr(dtype, "name", dtype))
    if op not in OPS or dtype not in _SUFFIX:
        raise KeyError((op, dtype))
    return "%s_%s" % (op, _SUFFIX[dtype])
