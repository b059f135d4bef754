"""The intrinsics behind streaming stores (see ntstores.py for why and when): what a
generated kernel that streams its outputs imports (``stream_block``, ``stream_fence``).
"""
from __future__ import annotations

import platform

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .ntstores import LINE

__all__ = ["stream_block", "stream_fence", "stack_buffer"]

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic(prefer_literal=True)
def stack_buffer(typingctx, like, count):
    """A 1-D array of `count` (a literal) elements of `like`'s dtype in the caller's stack
    frame, 64-byte aligned: a streaming kernel's L1 buffer (``np.empty`` would make a
    cache-loading process import numba's array module: 26-30 ms)."""
    if not (isinstance(like, types.Array) and isinstance(count, types.IntegerLiteral)):
        return None
    aryty = types.Array(like.dtype, 1, "C")
    sig = aryty(like, count)

    def codegen(context, builder, sig, args):
        from numba.np.arrayobj import populate_array   # at compile time only
        n = sig.args[1].literal_value
        elem = context.get_data_type(sig.return_type.dtype)
        intp = context.get_value_type(types.intp)
        with builder.goto_entry_block():
            data = builder.alloca(elem, size=ir.Constant(intp, n))
            data.align = LINE
        ary = context.make_array(sig.return_type)(context, builder)
        size = context.get_abi_sizeof(elem)
        populate_array(ary, data=data, shape=[ir.Constant(intp, n)], strides=[ir.Constant(intp, size)],
                       itemsize=ir.Constant(intp, size), meminfo=None)
        return ary._getvalue()
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


@intrinsic
def stream_block(typingctx, dst, lo, buf, m):
    """``dst[lo:lo + m] = buf[:m]``: ordinary stores before the first and after the last
    whole 64-byte line, non-temporal vector stores between; one dtype, C-contiguous. LLVM
    IR, not a numba function, which added a second to every streaming kernel's compile."""
    if not (isinstance(dst, types.Array) and isinstance(buf, types.Array) and dst.dtype == buf.dtype
            and isinstance(lo, types.Integer) and isinstance(m, types.Integer)):
        return None
    sig = types.void(dst, lo, buf, m)

    def codegen(context, builder, sig, args):
        from numba.core import cgutils
        d = context.make_array(sig.args[0])(context, builder, args[0])
        s = context.make_array(sig.args[2])(context, builder, args[2])
        intp = context.get_value_type(types.intp)
        start = context.cast(builder, args[1], sig.args[1], types.intp)
        count = context.cast(builder, args[3], sig.args[3], types.intp)
        elem = context.get_data_type(sig.args[0].dtype)
        size = context.get_abi_sizeof(elem)
        per_line = LINE // size
        const = lambda v: ir.Constant(intp, v)  # noqa: E731
        dst0 = builder.gep(d.data, [start])
        mis = builder.and_(builder.ptrtoint(dst0, intp), const(LINE - 1))
        head = builder.udiv(builder.and_(builder.sub(const(LINE), mis), const(LINE - 1)), const(size))
        # elements not aligned to their size (never for numpy's own arrays): no line stores
        whole = builder.icmp_unsigned("==", builder.urem(mis, const(size)), const(0))
        head = builder.select(whole, head, count)
        head = builder.select(builder.icmp_signed("<", count, head), count, head)
        lines = builder.sdiv(builder.sub(count, head), const(per_line))
        tail = builder.add(head, builder.mul(lines, const(per_line)))

        def copy(first, stop):
            with cgutils.for_range_slice(builder, first, stop, const(1)) as (j, _):
                builder.store(builder.load(builder.gep(s.data, [j])), builder.gep(dst0, [j]))
        copy(const(0), head)
        vec = ir.VectorType(elem, per_line)
        nt = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
        with cgutils.for_range(builder, lines) as loop:
            j = builder.add(head, builder.mul(loop.index, const(per_line)))
            value = builder.load(builder.bitcast(builder.gep(s.data, [j]), vec.as_pointer()), align=1)
            store = builder.store(value, builder.bitcast(builder.gep(dst0, [j]), vec.as_pointer()), align=LINE)
            store.set_metadata("nontemporal", nt)
        copy(tail, count)
        return context.get_dummy_value()
    return sig, codegen
