"""A one-pass numba kernel for ReLU's input gradient (``relu_backward``'s eager form).

Why: ``g where y > 0 else 0`` has no single numpy loop. ``numpy.where`` branches per
element (~14 ms over 2M float32 on a random mask); the branch-free form the op used (a
comparison pass, a pass widening the bool mask to all-ones/all-zeros integers, a bitwise
and: elementwise._select_or_zero) is three passes and an 8 MB temporary for a 2048x1024
FFN activation, 4.7-6.0 ms in the eager Transformer step where PyTorch's
threshold_backward is one pass. This loop reads g and y once and writes the result once
(2.4 ms for that activation, one thread, load 4: about memory speed, 1.5 ms being one
8 MB copy here); LLVM turns the select into a vector blend.

Large eager calls with more than one free core can still take compiler/cpu/kernels/vectorized.py's
generated multi-threaded kernel first (the eager dispatcher tries it before the impl);
this kernel serves every other eager call from ``MIN_ELEMENTS`` up, and sync mode (tests,
benchmarks), where that generated kernel is only loaded from disk. Compiled plans fuse
the op from its scalar rule and never come here. Loaded with compiler/cpu/kernels/loader.py's policy
(background compile, numpy form until ready, sync mode loads at once).

Exactness: the kept elements keep their bits (nan, inf, -0.0), the others are +0.0, and
``y > 0`` is false for nan: bitwise the numpy form's result (the tests compare bits).
"""
from __future__ import annotations

import numpy as np

from .loader import kernel as _kernel, takes as _takes

__all__ = ["relu_backward_flat", "MIN_ELEMENTS"]

# Below this the numpy form's passes stay in cache and the call overhead decides.
MIN_ELEMENTS = 1 << 15

_RELU_BACKWARD = '''
from numba import njit
import numpy as np


@njit("void(Array({t}, 1, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), {t}[::1])",
      cache=CACHE, boundscheck=False)
def kernel(g, y, out):
    zero = np.{t}(0)
    for i in range(g.shape[0]):
        out[i] = g[i] if y[i] > zero else zero
'''


def relu_backward_flat(xp, g, y):
    """``g where y > 0 else +0.0`` in one pass by the kernel, or None (the caller's numpy
    form runs): g and y C-contiguous numpy arrays of one float dtype and one shape."""
    if (not _takes(xp, g, y) or g.shape != y.shape or g.size < MIN_ELEMENTS
            or not (g.flags.c_contiguous and y.flags.c_contiguous)):
        return None
    t = g.dtype.name
    fn = _kernel(("select", "relu_backward", t), lambda: _RELU_BACKWARD.replace("{t}", t),
                 steady=True).get()
    if fn is None:
        return None
    out = np.empty(g.shape, g.dtype)
    fn(g.reshape(-1), y.reshape(-1), out.reshape(-1))
    return out


def relu_backward(g, y):
    """RELU_BACKWARD's CPU implementation (compiler/cpu/implementations.py): the kernel's
    one pass, or None (the numpy form runs)."""
    return relu_backward_flat(np, g, y)
