"""`run_into`: an in-place method's result computed straight into the tensor's memory,
through the eager plan of the out-of-place op (ops/eager.py), when no autograd node is
needed (``w -= lr * g`` under no_grad)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes as _dt
from ..device import CPU
from ..tensor import Tensor
from .impls import elementwise as _ew
from .promotion import scalar_as

if TYPE_CHECKING:
    from .registry import Primitive

__all__ = ["run_into"]


def run_into(prim: Primitive, dst, args) -> bool:
    """``dst = prim(*args)`` computed straight into the CPU tensor `dst`'s memory, as
    PyTorch's ``out=`` kernels do, for an in-place method that needs no autograd node
    (`dst -= lr * g` under no_grad). True when done; False, having changed nothing, when
    the impl is not a ufunc, an operand is not a CPU tensor or number, the signature has
    no plan yet, or the plan's result dtype or shape is not `dst`'s. Values are those of
    the out-of-place op (same plan, same ufunc or kernel)."""
    u = prim.ufunc
    if u is None:
        return False
    n = len(args)
    if n == 2:
        a, b = args
        if isinstance(b, Tensor):
            if b.device is not CPU:
                return False
            y = b._data
            key = (a._data.shape, a.dtype, y.shape, b.dtype)
        else:
            y = b
            key = (a._data.shape, a.dtype, type(b))
    elif n == 1:
        a = args[0]
        key = (a._data.shape, a.dtype)
    else:
        return False
    plan = prim.plans.get(key)
    if (plan is None or plan.default is not _dt._default_float or plan.out_dtype is not dst.dtype
            or plan.out_shape != dst._data.shape):
        return False
    out = dst._data
    if not out.flags.c_contiguous:
        # numpy 2.4's SIMD np.negative writes wrong values through an output strided by 4
        # float32 (8 float64) elements; the out-of-place path computes into fresh memory.
        return False
    x = a._data
    c0 = plan.casts[0]
    if c0 is not None:
        x = x.astype(c0)
    # (the ufunc called with its operands spelled out: `u(*arrays, out=out)` costs a
    # tuple and its unpacking, ~0.2 µs of an optimizer's ~1 µs update of a small tensor)
    if n == 2:
        c1 = plan.casts[1]
        if c1 is not None:
            y = y.astype(c1) if y is not b else scalar_as(y, c1)
        if not (plan.big and _kernel_into(prim, plan, (x, y), out)):
            u(x, y, out=out)
    elif not (plan.big and _kernel_into(prim, plan, (x,), out)):
        u(x, out=out)
    return True


def _kernel_into(prim, plan, arrays, out) -> bool:
    """`run_into`'s large operands: the op's kernel writing `out`, when it may (`_apart`)
    and runs; False when numpy's ufunc is to run instead."""
    return (out.flags.c_contiguous and not _ew.declines(prim, plan.out_shape)
            and _apart(arrays, out)
            and _ew.run(prim, arrays, {}, plan.compute_np, plan.out_np, plan.out_shape,
                                out=out) is not None)


# numpy's C function itself where it is reachable: np.may_share_memory goes through the
# __array_function__ dispatch first (half its cost; `_apart` runs on every large in-place
# update, ``w -= lr * g``)
try:
    from numpy._core._multiarray_umath import may_share_memory as _may_share_memory
except ImportError:     # (another numpy's layout)
    _may_share_memory = np.may_share_memory


def _apart(arrays, out) -> bool:
    """Whether a kernel may write `out` while reading `arrays`: each is `out` itself (read
    at the index it is written) or shares no memory with it (the kernel, unlike numpy's
    ufuncs, does not buffer an operand that overlaps its output elsewhere)."""
    for x in arrays:
        if isinstance(x, np.ndarray) and x is not out and _may_share_memory(x, out):
            if not (x.shape == out.shape and x.strides == out.strides
                    and x.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
                return False
    return True
