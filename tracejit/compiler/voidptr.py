"""``as_voidptr``: an int64 address as a numba ``void*``; ``carray_at``: the C-contiguous array
at an address (a ``void*`` or an int64), for the GIL-free share entries of generated kernels
(compiler/cshares.py) and the hand-written halves (ops/halves.py, ops/skinny_gemm.py). A module
of its own: it imports numba, which code generation must not need."""
from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["as_voidptr", "carray_at"]


@intrinsic
def as_voidptr(typingctx, addr):
    """An int64 address as a ``void*``."""
    sig = types.voidptr(addr)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return sig, codegen


@intrinsic
def carray_at(typingctx, addr, shape, dtype):
    """``carray(as_voidptr(addr), shape, dtype)`` built in place: the C-contiguous array of
    `shape` at `addr` (an int64 address or a ``void*``), by numba's own lowering of
    ``carray``. Why not ``carray``: it is an overload whose implementation numba compiles
    as a function of its own per dtype and rank (typing, lowering, LLVM, machine code), then
    links and optimises again inside the caller; a pair module's share entry compiled five
    (Transformer pairs, worker CPU: 0.92-0.95 -> 0.76-0.78 s, 0.79-0.86 -> 0.67-0.69,
    0.68-0.70 -> 0.54-0.64; session 22)."""
    from numba.core.typing import signature
    from numba.np.arrayobj import np_cfarray, ty_parse_shape
    if not isinstance(dtype, types.DTypeSpec) or not (isinstance(addr, types.Integer)
                                                      or addr == types.voidptr):
        return None
    ndim = ty_parse_shape(shape)
    if ndim is None:
        return None
    retty = types.Array(dtype.dtype, ndim, "C")
    sig = signature(retty, addr, shape, dtype)

    def codegen(context, builder, signature_, args):
        ptr = (args[0] if addr == types.voidptr
               else builder.inttoptr(args[0], context.get_value_type(types.voidptr)))
        return np_cfarray(context, builder, signature(retty, types.voidptr, shape), (ptr, args[1]))
    return sig, codegen


@intrinsic
def call_at(typingctx, addr, fn, args):
    """``fn(*args)`` through the address `addr` (int64) of `fn`'s compiled code (`native_address`):
    `fn` a dispatcher compiled for one signature, `args` a tuple cast to it. Numba's own call
    of a dispatcher links its whole library into the caller's, which LLVM then optimises and
    emits again (a pair's share entry: 0.13-0.36 s of a kernel compiled twice)."""
    from numba.core.typing import signature
    if not isinstance(fn, types.Dispatcher) or not isinstance(addr, types.Integer):
        return None
    sigs = fn.dispatcher.signatures
    if len(sigs) != 1 or not isinstance(args, types.BaseTuple) or len(args) != len(sigs[0]):
        return None
    target = fn.dispatcher.overloads[sigs[0]].signature
    sig = signature(types.none, addr, fn, args)

    def codegen(context, builder, signature_, llargs):
        from numba.core import cgutils
        vals = [context.cast(builder, v, t, want) for v, t, want in
                zip(cgutils.unpack_tuple(builder, llargs[2]), args, target.args)]
        fnty = context.call_conv.get_function_type(target.return_type, target.args)
        callee = builder.inttoptr(llargs[0], fnty.as_pointer())
        context.call_conv.call_function(builder, callee, target.return_type, target.args, vals)
        return context.get_dummy_value()
    return sig, codegen


def native_address(dispatcher) -> int:
    """The address of `dispatcher`'s compiled code for its one signature (numba's calling
    convention: what `call_at` calls)."""
    (sig,) = dispatcher.signatures
    cres = dispatcher.overloads[sig]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
