"""bfloat16 storage: the bit conversions every path shares.

A `tracejit.bfloat16` tensor stores its elements as uint16 words, the upper half of the
float32 with the same sign and exponent, so numpy and numba (neither has a bf16 type)
hold it as a plain uint16 array. Values are computed in float32 and rounded to nearest
even on store; `to_float32` is exact. tracejit has no uint16 dtype, so a uint16 array
inside tracejit is always bf16 storage. With ``ml_dtypes`` installed, ``Tensor.numpy()``
returns its ``bfloat16`` view of the same memory.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

__all__ = ["STORAGE", "to_bfloat16", "to_float32", "round_values", "add_into", "ml_bfloat16", "is_storage", "cast",
           "matmul_words", "widened"]

STORAGE = np.dtype(np.uint16)


def to_bfloat16(x) -> np.ndarray:
    """float32 (or anything numpy casts to it) -> uint16 bf16 words, round to nearest even;
    NaN stays a quiet NaN of the same sign, overflow rounds to infinity as IEEE does."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32) if f.ndim else f.reshape(1).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(f.reshape(u.shape))
    if nan.any():
        r[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return r.reshape(f.shape)


def to_float32(bits) -> np.ndarray:
    """uint16 bf16 words -> float32 (exact)."""
    b = np.asarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_values(f: np.ndarray) -> np.ndarray:
    """float32 -> float32 holding each value rounded to bf16, ``to_float32(to_bfloat16(f))``:
    a value rounded to bf16 only to be widened again (the autograd engine's gradients
    between two ops computed in float32) in one pass where a backend registered one
    (`FASTER`: the CPU's kernel, compiler/cpu/gemm/bf16.py)."""
    fast = FASTER[0]
    return to_float32(to_bfloat16(f)) if fast is None else fast(f)


FASTER: list = [None]    # a one-pass `round_values`, registered by a backend


def add_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst += src`` for bf16 words (in-place gradient accumulation): the float32 sum of
    the values rounded once, never an integer sum of the words."""
    dst[...] = to_bfloat16(to_float32(dst) + to_float32(src))


@contextmanager
def widened(written: list, read: list = ()):
    """Arrays to do arithmetic on in place of bf16 words, which have none: float32 copies of
    those of `written` and `read` that hold words (the others as they are). On a normal exit
    the float32 values of `written` are rounded back into their words once; after an error
    the words are as they were."""
    wide = [to_float32(a) if a.dtype == STORAGE else a for a in written]
    yield wide, [to_float32(a) if a.dtype == STORAGE else a for a in read]
    for a, w in zip(written, wide):
        if w is not a:
            a[...] = to_bfloat16(w)


def is_storage(a) -> bool:
    """Whether array `a` holds bf16 words (uint16, or ml_dtypes' bfloat16)."""
    dt = getattr(a, "dtype", None)
    return dt is not None and (dt == STORAGE or dt.name == "bfloat16")


def ml_bfloat16():
    """ml_dtypes' numpy bfloat16 dtype, or None when ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def cast(xp, a, dtype):
    """The cast primitive's numpy form where bf16 is the source or the target."""
    if xp is not np:
        raise NotImplementedError(f"bfloat16 tensors live on the CPU; cast to {dtype.name} there first")
    if a.dtype == STORAGE:
        if dtype.name == "bfloat16":
            return a.copy()
        return to_float32(a).astype(dtype.np, copy=False)
    return to_bfloat16(a)   # (float64 through float32 first, as PyTorch's conversion does)


def matmul_words(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The matmul primitive's numpy form on bf16 words: the float32 product of the
    values, rounded once (backends register faster ways: compiler/cpu/gemm/bf16.py)."""
    return to_bfloat16(np.matmul(to_float32(a), to_float32(b)))
