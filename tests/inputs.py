"""Inputs the compiler tests share: seeded random tensors and the GELU chain of the issue.

``from inputs import T, gelu`` (the tests directory is on ``sys.path``, see conftest).
"""
from __future__ import annotations

import numpy as np

import tracejit as tj


def T(*shape, seed=0, rg=True, dtype=np.float32, low=None):
    """A standard-normal tensor of `shape` (|x| + low when `low` is given), requiring grad
    unless ``rg=False``. Different shapes draw different data for the same seed."""
    a = np.random.default_rng(seed + 13 * len(shape)).standard_normal(shape).astype(dtype)
    if low is not None:
        a = np.abs(a) + low
    t = tj.tensor(a)
    return t.requires_grad_() if rg else t


def gelu(x, y, z):
    """The issue's GELU chain: a = x*y + z; 0.5*a*(1 + tanh(0.79788456*(a + 0.044715*a**3)))."""
    a = x * y + z
    return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))
