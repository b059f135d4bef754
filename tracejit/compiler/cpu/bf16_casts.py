"""The cast primitive between float32 and bf16 words: one parallel pass, not numpy's six.

Under autocast every product's operands cross between float32 and bf16, and numpy's
rounding (add, shift, mask, NaN test, select) made the casts 30 ms of LeNet's 65 ms step;
gemm/bf16.py's kernels give the same bits in one read and one write. Other casts run the
numpy form.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as _dt
from ...bf16 import STORAGE
from .gemm.bf16 import round_words, widen_words

__all__ = ["cast", "converts"]

_F32 = np.dtype(np.float32)


def converts(a, dtype) -> bool:
    """The checker: a numpy float32 array to bf16, or bf16 words to float32."""
    if type(a) is not np.ndarray:
        return False
    if dtype is _dt.bfloat16:
        return a.dtype == _F32
    return dtype is _dt.float32 and a.dtype == STORAGE


def cast(a: np.ndarray, dtype) -> np.ndarray:
    """``cast(a, dtype)`` for the calls `converts` accepts (the kernels from 4096 elements)."""
    return round_words(a) if dtype is _dt.bfloat16 else widen_words(a)
