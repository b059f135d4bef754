"""Intrinsics for code that C threads run holding no Python object: ``carray_at`` (the
C-contiguous array at an address, a ``void*`` or an int64) and ``call_at`` (a compiled dispatcher called through its address), for
the GIL-free share entries of generated kernels (compiler/cpu/runtime/cshares.py) and the hand-written
halves (compiler/cpu/gemm/halves.py, compiler/cpu/gemm/skinny_gemm.py); ``call_sgemm`` / ``call_dgemm`` (a cblas GEMM called
by address on int64 addresses: compiler/cpu/gemm/halves.py's product pairs); ``call_get_count`` /
``call_set_count`` (BLAS's thread count's getter and setter by address: the pairs' launch);
``put_array`` / ``table_array`` (an array's address and shape into an int64 table, and the
array back from it: the share entries' tables); ``put_row`` (a tuple of integers into a row
of an int64 table: the halves' records). A module of its own: it imports
numba, which code generation must not need."""
from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["carray_at", "call_at", "native_address", "call_sgemm", "call_dgemm", "call_pthread",
           "call_get_count", "call_set_count", "put_array", "table_array", "put_row"]


@intrinsic
def carray_at(typingctx, addr, shape, dtype):
    """``carray(addr as a void*, shape, dtype)`` built in place: the C-contiguous array of
    `shape` at `addr` (an int64 address or a ``void*``), by numba's own lowering of
    ``carray``. Why not ``carray``: it is an overload whose implementation numba compiles
    as a function of its own per dtype and rank (typing, lowering, LLVM, machine code), then
    links and optimises again inside the caller; a pair module's share entry compiled five
    (Transformer pairs, worker CPU: 0.92-0.95 -> 0.76-0.78 s, 0.79-0.86 -> 0.67-0.69,
    0.68-0.70 -> 0.54-0.64)."""
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


def _gemm_call(double: bool):
    """The intrinsic ``call(fn, order, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc)``:
    ``C = op(A) op(B)`` (alpha 1, beta 0) by the cblas_?gemm of 64-bit integers (an ILP64
    OpenBLAS, numpy's wheels') at address `fn`; every argument an int64, a, b and c the
    matrices' addresses. (compiler/cpu/gemm/blas_gemm.py's GEMM_SOURCE takes arrays and a library's
    integer width; a share entry has addresses only.)"""
    def call(typingctx, fn, order, ta, tb, m, n, k, a, lda, b, ldb, c, ldc):
        sig = types.void(fn, order, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)

        def codegen(context, builder, signature, args):
            from llvmlite import ir
            i32, i64 = ir.IntType(32), ir.IntType(64)
            ft = ir.DoubleType() if double else ir.FloatType()
            fp = ft.as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, ft, fp, i64, fp, i64,
                                                   ft, fp, i64])
            f = builder.inttoptr(args[0], fnty.as_pointer())
            order_, ta_, tb_ = (builder.trunc(x, i32) for x in args[1:4])
            m_, n_, k_, a_, lda_, b_, ldb_, c_, ldc_ = args[4:]
            builder.call(f, [order_, ta_, tb_, m_, n_, k_, ir.Constant(ft, 1.0), builder.inttoptr(a_, fp),
                             lda_, builder.inttoptr(b_, fp), ldb_, ir.Constant(ft, 0.0),
                             builder.inttoptr(c_, fp), ldc_])
            return context.get_dummy_value()
        return sig, codegen
    call.__name__ = call.__qualname__ = "call_dgemm" if double else "call_sgemm"
    return intrinsic(call)


call_sgemm = _gemm_call(False)
call_dgemm = _gemm_call(True)


@intrinsic
def call_pthread(typingctx, fn, n, entry, args, stride):
    """``fn(n, entry, args, stride)`` through the address `fn` (int64) of OpenBLAS's
    ``int gotoblas_pthread(int numthreads, void *function, void *args, int stride)``: `entry`
    (a ``void(void*)`` cfunc's address) on ``args + q * stride`` for q in 0..n-1, share 0 on
    the calling thread and the others on OpenBLAS's workers, returning once all ended. Every
    argument an int64 (the addresses as integers). compiler/cpu/gemm/halves.py's elementwise launch calls
    it from the numba function that fills the records: one dispatcher call a launch instead
    of a record filler's and a ctypes call's (the GIL stays held: the shares take none)."""
    if not all(isinstance(a, types.Integer) for a in (fn, n, entry, args, stride)):
        return None
    sig = types.int64(fn, n, entry, args, stride)

    def codegen(context, builder, signature, llargs):
        from llvmlite import ir
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vp = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i32, [i32, vp, vp, i32])
        f = builder.inttoptr(llargs[0], fnty.as_pointer())
        r = builder.call(f, [builder.trunc(llargs[1], i32), builder.inttoptr(llargs[2], vp),
                             builder.inttoptr(llargs[3], vp), builder.trunc(llargs[4], i32)])
        return builder.sext(r, i64)
    return sig, codegen


@intrinsic
def call_get_count(typingctx, fn):
    """``fn()`` through the address `fn` (int64) of an ``int f(void)``: BLAS's thread-count
    getter (``openblas_get_num_threads``, threads.py's); the int widened to int64."""
    if not isinstance(fn, types.Integer):
        return None
    sig = types.int64(fn)

    def codegen(context, builder, signature, llargs):
        from llvmlite import ir
        fnty = ir.FunctionType(ir.IntType(32), [])
        return builder.sext(builder.call(builder.inttoptr(llargs[0], fnty.as_pointer()), []), ir.IntType(64))
    return sig, codegen


@intrinsic
def call_set_count(typingctx, fn, n):
    """``fn(n)`` through the address `fn` (int64) of a ``void f(int)``: BLAS's thread-count
    setter (``openblas_set_num_threads``, threads.py's); `n` an int64 cut to int."""
    if not (isinstance(fn, types.Integer) and isinstance(n, types.Integer)):
        return None
    sig = types.void(fn, n)

    def codegen(context, builder, signature, llargs):
        from llvmlite import ir
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i32])
        builder.call(builder.inttoptr(llargs[0], fnty.as_pointer()), [builder.trunc(llargs[1], i32)])
        return context.get_dummy_value()
    return sig, codegen


# Why the two below: a share entry's tables (compiler/cpu/runtime/cshares.py) written and read a slot at
# a time (``itab[k] = x.ctypes.data``, ``itab[k + 1] = x.shape[0]``, ...;
# ``carray_at(it[k], (it[k + 1], ...), dtype)``) cost numba's lowering ~3 ms a slot (each
# setitem or getitem builds the table's array structure again): the Transformer step's five
# pair modules compiled in 1.07-1.13 s of a worker's CPU, 0.81-0.84 s with these.
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
    """The C-contiguous array of `dtype` and `ndim` (a constant) dimensions whose address is
    ``tab[i]`` and shape ``tab[i + 1 : i + 1 + ndim]`` (as `put_array` wrote them): one
    intrinsic for `carray_at` over the table's slots."""
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


@intrinsic
def put_row(typingctx, tab, q, vals):
    """``tab[q, :len(vals)] = vals``: `tab` a C-contiguous 2-D int64 array, `vals` a tuple of
    integers (each stored as int64). compiler/cpu/gemm/halves.py's record fillers: their loop over a tuple
    (``for i in range(len(vals)): tab[q, i] = vals[i]``, numba-inlined at seven call sites)
    took numba's typing and lowering 0.12-0.2 s of the halves module's compile, a tuple
    indexed by a variable being a switch over its elements."""
    from numba.core.typing import signature
    if not (isinstance(tab, types.Array) and tab.dtype == types.int64 and tab.ndim == 2
            and tab.layout == "C" and isinstance(q, types.Integer) and isinstance(vals, types.BaseTuple)
            and all(isinstance(t, types.Integer) for t in vals)):
        return None
    sig = signature(types.none, tab, q, vals)

    def codegen(context, builder, signature_, args):
        from numba.core import cgutils
        i64 = context.get_value_type(types.int64)
        t = context.make_array(tab)(context, builder, args[0])
        cols = cgutils.unpack_tuple(builder, t.shape, 2)[1]
        base = builder.mul(context.cast(builder, args[1], signature_.args[1], types.int64), cols)
        for d, (v, ty) in enumerate(zip(cgutils.unpack_tuple(builder, args[2]), vals)):
            builder.store(context.cast(builder, v, ty, types.int64),
                          builder.gep(t.data, [builder.add(base, i64(d))]))
        return context.get_dummy_value()
    return sig, codegen
