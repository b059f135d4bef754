"""The intrinsics behind streaming stores (see ntstores.py for why and when): what a
generated kernel that streams its outputs imports (``stream_block``, ``stream_fence``).
"""
from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .ntstores import LINE

__all__ = ["stream_block", "stream_fence"]

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def _store_line(typingctx, dst, i, src, j):
    """``dst[i:i + k] = src[j:j + k]`` for the k elements of one 64-byte line, as one
    non-temporal store; ``&dst[i]`` must be 64-byte aligned (``src`` need not be)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype
            and isinstance(i, types.Integer) and isinstance(j, types.Integer)):
        return None
    sig = types.void(dst, i, src, j)

    def codegen(context, builder, sig, args):
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        di = context.cast(builder, args[1], sig.args[1], types.intp)
        sj = context.cast(builder, args[3], sig.args[3], types.intp)
        elem = context.get_data_type(sig.args[0].dtype)
        vec = ir.VectorType(elem, LINE // context.get_abi_sizeof(elem))
        value = builder.load(builder.bitcast(builder.gep(s.data, [sj]), vec.as_pointer()), align=1)
        store = builder.store(value, builder.bitcast(builder.gep(d.data, [di]), vec.as_pointer()), align=LINE)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _address(typingctx, arr, i):
    """The address of ``arr[i]`` as an unsigned integer."""
    if not (isinstance(arr, types.Array) and isinstance(i, types.Integer)):
        return None
    sig = types.uintp(arr, i)

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        ii = context.cast(builder, args[1], sig.args[1], types.intp)
        return builder.ptrtoint(builder.gep(a.data, [ii]), context.get_value_type(types.uintp))
    return sig, codegen


@intrinsic
def stream_fence(typingctx):
    """Order the non-temporal stores before everything after (``sfence`` on x86, a full
    fence elsewhere)."""
    sig = types.void()

    def codegen(context, builder, sig, args):
        if _X86:
            name = "llvm.x86.sse.sfence"
            fn = builder.module.globals.get(name)
            if fn is None:
                fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), []), name)
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=False, nogil=True, error_model="numpy")
def stream_block(dst, lo, buf, m):
    """``dst[lo:lo + m] = buf[:m]``: the elements before ``dst``'s first 64-byte boundary
    in the range and after its last whole line with ordinary stores, the lines between
    with non-temporal ones. ``dst`` is a C-contiguous 1-D array."""
    size = dst.itemsize
    mis = _address(dst, lo) % np.uintp(LINE)
    head = np.intp((np.uintp(LINE) - mis) % np.uintp(LINE)) // size if mis % np.uintp(size) == 0 else m
    if head > m:
        head = m
    per_line = LINE // size
    lines = (m - head) // per_line
    for j in range(head):
        dst[lo + j] = buf[j]
    for k in range(lines):
        _store_line(dst, lo + head + k * per_line, buf, head + k * per_line)
    for j in range(head + lines * per_line, m):
        dst[lo + j] = buf[j]
