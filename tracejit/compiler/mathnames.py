"""The one list of math functions a kernel may call, and how each backend provides them.

A scalar rule asks its emitter for a function by name (``e.call("tanh", a)``); `MATH`
says how each backend spells it: the CPU backend calls `mathlib`'s vectorizable
``<name>_f32``/``<name>_f64`` or a builtin LLVM lowers to an intrinsic; CUDA calls numba's
``math`` function (libdevice by type; numpy's ufunc under the simulator) or, where
libdevice has none, a formula from `FORMULAS` (the stable sigmoid and softplus, as mathlib
and eager compute them). Imports nothing heavy: rendering must not import numba. To add a
function: a row in `MATH`, mathlib's ``*_f32``/``*_f64``, and a CUDA name or formula.
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
    "erfc": MathFn(1, "mathlib", "libdevice", None),
    "sin": MathFn(1, "mathlib", "libdevice", "np.sin"),
    "cos": MathFn(1, "mathlib", "libdevice", "np.cos"),
    "pow": MathFn(2, "mathlib", "libdevice", "np.power"),
    "sqrt": MathFn(1, "math.sqrt", "libdevice", "np.sqrt"),
    "floor": MathFn(1, "np.floor", "libdevice", "np.floor", integer_identity=True),
    "fmod": MathFn(2, "np.fmod", "libdevice", "np.fmod"),   # (exact, unlike a - trunc(a/b)*b)
    # (libm's, through LLVM's intrinsics: within an ulp, where exp(x ln 2) and log(x) / ln 10
    # were 64 and 3 float32 ulps off)
    "exp2": MathFn(1, "np.exp2", "formula", "np.exp2"),
    "log2": MathFn(1, "np.log2", "libdevice", "np.log2"),
    "log10": MathFn(1, "np.log10", "libdevice", "np.log10"),
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


def _exp2(e, x: str) -> str:
    return e.call("pow", e.const(2), x)   # (libdevice's pow: exact at integers)


FORMULAS: dict[str, Callable] = {"sigmoid": _sigmoid, "softplus": _softplus, "exp2": _exp2}

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
