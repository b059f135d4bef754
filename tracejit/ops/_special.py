"""Special functions numpy lacks, for the eager (reference) path.

erf is evaluated with Python's correctly rounded ``math.erf`` per element: slow but
exact, which is what a reference implementation should be. Compiled kernels use the
vectorizable approximations in ``tracejit.compiler.mathlib``.
"""
from __future__ import annotations

import math

import numpy as np

_erf_u = np.frompyfunc(math.erf, 1, 1)


def erf(a: np.ndarray) -> np.ndarray:
    return np.asarray(_erf_u(a), dtype=a.dtype)
