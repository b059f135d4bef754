"""Half-precision opmath: float16 and bfloat16 inputs computed in float32, rounded once.

PyTorch's CPU kernels load a half-precision element, compute in float32 (the "opmath"
type) and round the result once. A composite written with primitives would round after
every primitive instead (silu = x * sigmoid(x): twice), and differ from PyTorch in the last
bit for about a third of float16 inputs. `opmath` runs a composite's body in float32 for a
half-precision input; the casts around it carry the gradients, so the backward computes in
float32 too and rounds once, as PyTorch's ``*_backward`` kernels do.
"""
from __future__ import annotations

import functools
from typing import Callable

from .. import dtypes as _dt
from .elementwise import cast

__all__ = ["HALF", "in_opmath", "as_input", "opmath"]

HALF = (_dt.float16, _dt.bfloat16)


def in_opmath(input):
    """`input` in the dtype a kernel computes it in: float32 for a float16 or bfloat16
    input, else itself."""
    return cast(input, _dt.float32) if input.dtype in HALF else input


def as_input(y, input):
    """Result `y` in `input`'s dtype (rounded once where it was computed wider)."""
    return y if y.dtype is input.dtype else cast(y, input.dtype)


def opmath(fn: Callable) -> Callable:
    """`fn(x, *args, **kwargs)` computed in float32 for a half-precision tensor `x` and
    rounded once to x's dtype; `fn` itself for any other `x`."""
    @functools.wraps(fn)
    def run(x, *args, **kwargs):
        dt = getattr(x, "dtype", None)
        if dt is not _dt.float16 and dt is not _dt.bfloat16:
            return fn(x, *args, **kwargs)
        return as_input(fn(cast(x, _dt.float32), *args, **kwargs), x)
    return run
