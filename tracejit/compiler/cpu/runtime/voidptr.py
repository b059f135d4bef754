"""Intrinsics for code that C threads run holding no Python object: ``carray_at`` (the
C-contiguous array at an address), ``call_at`` (a compiled dispatcher called through its
address), ``put_array`` / ``table_array`` (an array through an int64 table), and ``claim``
/ ``arrive`` (atomic counters). A module of its own: it imports numba, which code
generation must not need.

`claim(counter)` is a monotonic fetch-and-add on ``counter[0]``: each call returns the next
unclaimed chunk, so a share that starts late takes fewer chunks instead of the launch
waiting for its fixed stripe. `arrive(counter)` is the same add with acquire-release
ordering, so the share that sees the others' count has seen their writes (a folded
reduction's last share folds the partials)."""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["carray_at", "call_at", "native_address", "put_array", "table_array", "claim", "arrive"]


@intrinsic
def carray_at(typingctx, addr, shape, dtype):
    """``carray(addr, shape, dtype)`` built in place by numba's own lowering: ``carray``
    itself is an overload compiled as a function of its own per dtype and rank and linked
    again into the caller (a pair module's entry compiles in ~17% less time)."""
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
    """``fn(*args)`` through the address `addr` of `fn`'s compiled code (`native_address`):
    numba's own dispatcher call links fn's whole library into the caller and compiles it
    again."""
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


# Why the two below: tables read and written a slot at a time cost numba's lowering ~3 ms
# a slot (each access rebuilds the array structure).
@intrinsic(prefer_literal=True)
def put_array(typingctx, tab, i, arr):
    """``tab[i] = arr``'s address, ``tab[i + 1 + d] = arr.shape[d]`` for each dimension d:
    `tab` a C-contiguous int64 array, `i` an integer (`table_array` reads them back)."""
    from numba.core.typing import signature
    if not (isinstance(tab, types.Array) and tab.dtype == types.int64 and tab.layout == "C"
            and isinstance(i, types.Integer) and isinstance(arr, types.Array)):
        return None
    sig = signature(types.none, tab, i, arr)

    def codegen(context, builder, signature_, args):
        from numba.core import cgutils
        i64 = context.get_value_type(types.int64)
        t = context.make_array(tab)(context, builder, args[0])
        a = context.make_array(arr)(context, builder, args[2])
        at = context.cast(builder, args[1], signature_.args[1], types.int64)
        vals = [builder.ptrtoint(a.data, i64)] + cgutils.unpack_tuple(builder, a.shape, arr.ndim)
        for d, v in enumerate(vals):
            builder.store(v, builder.gep(t.data, [builder.add(at, i64(d))]))
        return context.get_dummy_value()
    return sig, codegen


@intrinsic(prefer_literal=True)
def table_array(typingctx, tab, i, ndim, dtype):
    """The C-contiguous array of `dtype` and `ndim` dimensions at ``tab[i]`` with shape
    ``tab[i + 1 : i + 1 + ndim]``, as `put_array` wrote them."""
    from numba.core.typing import signature
    from numba.np.arrayobj import np_cfarray
    if not (isinstance(tab, types.Array) and tab.dtype == types.int64 and tab.layout == "C"
            and isinstance(i, types.Integer) and isinstance(ndim, types.IntegerLiteral)
            and isinstance(dtype, types.DTypeSpec)):
        return None
    nd = ndim.literal_value
    retty = types.Array(dtype.dtype, nd, "C")
    sig = signature(retty, tab, i, ndim, dtype)

    def codegen(context, builder, signature_, args):
        i64 = context.get_value_type(types.int64)
        t = context.make_array(tab)(context, builder, args[0])
        at = context.cast(builder, args[1], signature_.args[1], types.int64)
        vals = [builder.load(builder.gep(t.data, [builder.add(at, i64(d))])) for d in range(nd + 1)]
        shape_type = types.UniTuple(types.int64, nd)
        shape = context.make_tuple(builder, shape_type, vals[1:])
        ptr = builder.inttoptr(vals[0], context.get_value_type(types.voidptr))
        return np_cfarray(context, builder, signature(retty, types.voidptr, shape_type), (ptr, shape))
    return sig, codegen


def _fetch_add(counter, ordering: str):
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1):
        return None
    sig = types.int64(counter)

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", data, ir.Constant(ir.IntType(64), 1), ordering)
    return sig, codegen


@intrinsic
def claim(typingctx, counter):
    """``counter[0]`` before adding 1 to it, atomically (`counter`: a 1-D int64 array)."""
    return _fetch_add(counter, "monotonic")


@intrinsic
def arrive(typingctx, counter):
    """`claim` with acquire-release ordering: the writes of every share that arrived
    before are visible to the one that reads their count."""
    return _fetch_add(counter, "acq_rel")
