"""The numba source of the GIL-free halves (halves.py): the records a launch hands
OpenBLAS's ``gotoblas_pthread``, the launches, and the cfunc entries each half runs on
its thread, holding no Python object. Text only: numba compiles it in a worker."""
from __future__ import annotations

__all__ = ["PAIR_SOURCE"]

# The kernel module's rows kernel run on a record of int64s: a, its size, ars, aks, m, kd,
# b, its size, n, c, its size (addresses and sizes of flat arrays). An elementwise half's
# record: op, n, a, b, out, a's and b's kind (0 array, 1 scalar), then the scalars' bits
# as float64 in slots 8 and 9.
PAIR_SOURCE = '''

from numba import cfunc
from tracejit.compiler.cpu.runtime.voidptr import call_at, call_get_count, call_pthread, call_set_count, carray_at, {g}
# (a record's slots from a tuple: one intrinsic, not a loop over the tuple, 0.12-0.2 s of
# this module's compile; voidptr.put_row)
from tracejit.compiler.cpu.runtime.voidptr import put_row as _put


# The records are filled in numba: an array's address costs ~2.4 us from Python (ndarray.ctypes
# or __array_interface__), and a launch needs four or five. The fillers (`gemm_records`,
# `ew_records`, `product_record`) are called only by the launches, so they have no CPython
# wrapper (compiled for nothing, ~0.1 s of the module; called from Python they would crash).


@njit("void(int64[:, ::1], Array({t}, 2, 'A', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "{t}[:, ::1], {t}[:, ::1], boolean)", cache=CACHE, no_cpython_wrapper=True)
def gemm_records(r, a, b, out, rest, by_rows):
    m, kd = a.shape
    n = b.shape[1]
    item = a.itemsize
    ars, aks = a.strides[0] // item, a.strides[1] // item
    ad, bd, cd = np.int64(a.ctypes.data), np.int64(b.ctypes.data), np.int64(out.ctypes.data)
    size = m * kd
    if by_rows:        # row halves, the first a multiple of 8 (the kernel's tile rows)
        h = (m // 2 + 7) // 8 * 8
        off = h * ars
        _put(r, 0, (ad, size, ars, aks, h, kd, bd, kd * n, n, cd, h * n))
        _put(r, 1, (ad + off * item, size - off, ars, aks, m - h, kd, bd, kd * n, n, cd + h * n * item,
                    (m - h) * n))
    else:              # depth halves: rows [0, h) and [h, kd) of b, the second into `rest`
        h = kd // 2
        off = h * aks
        _put(r, 0, (ad, size, ars, aks, m, h, bd, h * n, n, cd, m * n))
        _put(r, 1, (ad + off * item, size - off, ars, aks, m, kd - h, bd + h * n * item, (kd - h) * n,
                    n, np.int64(rest.ctypes.data), m * n))


# `gemm_records`, then `entry` (gemm_half's address) on both records at once through
# gotoblas_pthread at `pthread`: a product's whole launch in one dispatcher call, the GIL
# released (the filler and a ctypes call were two, with Python between: the MLP step's
# head products spent 8-9 us a launch around their halves on swept caches).
# Depth halves: the second half's partial product (`rest`) is added into `out` here, once
# both ended: the same float additions as numpy's ``out += rest`` after the launch, without
# its dispatch (the two-layer step's forward, 64x1000x100: ~1 us a step).
@njit("void(int64[:, ::1], Array({t}, 2, 'A', readonly=True), Array({t}, 2, 'C', readonly=True), "
      "{t}[:, ::1], {t}[:, ::1], boolean, int64, int64)", cache=CACHE, nogil=True)
def gemm_launch(r, a, b, out, rest, by_rows, pthread, entry):
    gemm_records(r, a, b, out, rest, by_rows)
    call_pthread(pthread, 2, entry, np.int64(r.ctypes.data), 128)
    if not by_rows:
        # (a 2-D loop, not over ``reshape(-1)`` views: numba compiles reshape's overload as a
        # function of its own, ~0.1 s of this module's compile; the same additions in order)
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] += rest[i, j]


@njit("void(int64[:, ::1], int64, Array({t}, 1, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), "
      "{t}[::1], int64, int64, float64)", cache=CACHE, no_cpython_wrapper=True)
def ew_records(r, op, x, y, out, xs, ys, s):
    # each half: op, its length, x's, y's and out's addresses, which operand is the scalar
    # `s` (xs, ys: the other operand stands in for its array), s's float64 bits in slot 8 or 9
    n = out.size
    h = n // 2
    item = out.itemsize
    xd, yd, od = np.int64(x.ctypes.data), np.int64(y.ctypes.data), np.int64(out.ctypes.data)
    _put(r, 0, (op, h, xd, yd, od, xs, ys))
    _put(r, 1, (op, n - h, xd + h * item, yd + h * item, od + h * item, xs, ys))
    # the records as float64 (their slots 8 and 9): ``r.view(np.float64)`` compiled numba's
    # view overload (``ol_compatible_view``) as a function of its own, 0.15-0.3 s of this
    # module's compile in a worker; carray_at builds the array in place
    f = carray_at(r.ctypes.data, r.shape, np.float64)
    f[0, 8] = f[1, 8] = f[0, 9] = f[1, 9] = s


# `ew_records`, then `entry` (ew_half's address) on both records at once through OpenBLAS's
# gotoblas_pthread at address `pthread`: the whole elementwise launch in one dispatcher call
# (the records' filler and a ctypes call were two, with Python between).
@njit("void(int64[:, ::1], int64, Array({t}, 1, 'C', readonly=True), Array({t}, 1, 'C', readonly=True), "
      "{t}[::1], int64, int64, float64, int64, int64)", cache=CACHE)
def ew_launch(r, op, x, y, out, xs, ys, s, pthread, entry):
    ew_records(r, op, x, y, out, xs, ys, s)
    call_pthread(pthread, 2, entry, np.int64(r.ctypes.data), 128)


# A product pair's record (`pair`): the cblas GEMM's address, then its arguments after the
# layout (row-major) as cblas takes them, alpha 1 and beta 0 left out: trans_a, trans_b, m, n,
# k, a, lda, b, ldb, c, ldc (ta, tb: 0 an operand as it lies, C-contiguous; 1 its transpose,
# the operand F-contiguous).
@njit("void(int64[:, ::1], int64, int64, int64, int64, Array({t}, 2, 'A', readonly=True), "
      "Array({t}, 2, 'A', readonly=True), {t}[:, ::1])", cache=CACHE, no_cpython_wrapper=True)
def product_record(r, q, fn, ta, tb, a, b, c):
    m, kd = a.shape
    n = b.shape[1]
    _put(r, q, (fn, 111 + ta, 111 + tb, m, n, kd, np.int64(a.ctypes.data), max(1, m if ta else kd),
                np.int64(b.ctypes.data), max(1, kd if tb else n), np.int64(c.ctypes.data), max(1, n)))


# `pair`'s whole launch in one dispatcher call, the GIL released: BLAS's count set to one
# (`get`, `put`: its getter's and setter's addresses; get 0: none known, the count left as
# it is), the two records, `entry` (product_whole's address) on both at once through
# gotoblas_pthread at `pthread`, the count put back. The same steps as Python's
# `blas_threads_set(1)` around `launch`, whose ctypes calls, records and checks took ~40 us
# of the MLP step's layer-2 pair on caches the step's GEMMs had swept.
@njit("void(int64[:, ::1], int64, int64, int64, int64, int64, int64, int64, "
      "Array({t}, 2, 'A', readonly=True), Array({t}, 2, 'A', readonly=True), {t}[:, ::1], int64, int64, "
      "Array({t}, 2, 'A', readonly=True), Array({t}, 2, 'A', readonly=True), {t}[:, ::1])",
      cache=CACHE, nogil=True)
def pair_launch(r, fn, pthread, entry, get, put, ta1, tb1, a1, b1, c1, ta2, tb2, a2, b2, c2):
    before = call_get_count(get) if get != 0 else 1
    if before != 1:
        call_set_count(put, 1)
    product_record(r, 0, fn, ta1, tb1, a1, b1, c1)
    product_record(r, 1, fn, ta2, tb2, a2, b2, c2)
    call_pthread(pthread, 2, entry, np.int64(r.ctypes.data), 128)
    if before != 1:
        call_set_count(put, before)


@cfunc("void(voidptr)", cache=CACHE)
def product_whole(rec):
    r = carray_at(rec, (16,), np.int64)
    {g}(r[0], np.int64(101), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11])


@cfunc("void(voidptr)", cache=CACHE)
def gemm_half(rec):
    r = carray_at(rec, (16,), np.int64)
    a = carray_at(r[0], (r[1],), np.{t})
    b = carray_at(r[6], (r[7],), np.{t})
    c = carray_at(r[9], (r[10],), np.{t})
    # the template's serial entry (template_panels.py) at its address in the records' slot 15 (`_Pair` puts it there
    # once): inlined here, its register tiles were compiled a second time in this module
    # (0.8 s of its 2.6 s compile), besides its own module
    call_at(r[15], gemm_kernel, (a, r[2], r[3], r[4], r[5], b, r[8], c))


# One loop per operand pattern. A result written over an operand gets a loop on that array
# alone: with two views of one address LLVM's runtime overlap check sends the loop to its
# scalar form (an in-place 100K-element float32 sub in halves took 24 us, numpy 13).
# Each its own numba function, not inlined by numba (``inline="always"``): inlined, the
# array loops stayed scalar (100K float32 add 8.8 -> 53.5 us, in-place sub 7.9 -> 37.0),
# though their own libraries cost the module's compile ~0.9 s of its 3.1-3.25.
# numpy's error model: x / 0 is inf or NaN, as numpy gives it. numba's default ('python')
# raises ZeroDivisionError, which a cfunc cannot pass on: the half stopped at the first zero
# divisor and left the rest of its output unwritten (a test divides by
# zeros). `ew_half` calls them by address (`EW_LOOPS`: their addresses in a table at the
# records' slot 14, put there by `_Pair`), compiled once each for their one signature: called
# by numba, each one's code was linked into `ew_half` and optimised and emitted again (0.25-0.3 s
# of the module's compile). No CPython wrappers (``no_cpython_wrapper``) either: nothing calls
# them from Python (they would crash), and each wrapper was compiled for nothing.
@njit(inline="always")
def _binop(op, a, b):
    if op == 0:
        return a + b
    if op == 1:
        return a - b
    if op == 2:
        return a * b
    return a / b


@njit("void(int64, {t}[::1], {t}[::1], {t}[::1])", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_arrays(op, o, a, b):
    for i in range(o.size):
        o[i] = _binop(op, a[i], b[i])


@njit("void(int64, {t}[::1], {t}[::1])", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_into_a(op, a, b):
    for i in range(a.size):
        a[i] = _binop(op, a[i], b[i])


@njit("void(int64, {t}[::1], {t}[::1])", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_into_b(op, a, b):
    for i in range(b.size):
        b[i] = _binop(op, a[i], b[i])


@njit("void(int64, {t}[::1], {t}[::1], {t})", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_scalar_right(op, o, a, s):
    for i in range(o.size):
        o[i] = _binop(op, a[i], s)


@njit("void(int64, {t}[::1], {t})", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_scalar_right_into(op, a, s):
    for i in range(a.size):
        a[i] = _binop(op, a[i], s)


@njit("void(int64, {t}[::1], {t}, {t}[::1])", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_scalar_left(op, o, s, b):
    for i in range(o.size):
        o[i] = _binop(op, s, b[i])


@njit("void(int64, {t}, {t}[::1])", cache=CACHE, error_model='numpy', no_cpython_wrapper=True)
def _ew_scalar_left_into(op, s, b):
    for i in range(b.size):
        b[i] = _binop(op, s, b[i])


@cfunc("void(voidptr)", cache=CACHE)
def ew_half(rec):
    r = carray_at(rec, (16,), np.int64)
    f = carray_at(rec, (16,), np.float64)
    op, n = r[0], r[1]
    fns = carray_at(r[14], (7,), np.int64)   # (`EW_LOOPS`' addresses)
    if r[5] == 1:                       # scalar op array
        s = np.{t}(f[8])
        b = carray_at(r[3], (n,), np.{t})
        if r[4] == r[3]:
            call_at(fns[6], _ew_scalar_left_into, (op, s, b))
        else:
            call_at(fns[5], _ew_scalar_left, (op, carray_at(r[4], (n,), np.{t}), s, b))
        return
    a = carray_at(r[2], (n,), np.{t})
    if r[6] == 1:                       # array op scalar
        s = np.{t}(f[9])
        if r[4] == r[2]:
            call_at(fns[4], _ew_scalar_right_into, (op, a, s))
        else:
            call_at(fns[3], _ew_scalar_right, (op, carray_at(r[4], (n,), np.{t}), a, s))
        return
    b = carray_at(r[3], (n,), np.{t})
    if r[4] == r[2]:
        call_at(fns[1], _ew_into_a, (op, a, b))
    elif r[4] == r[3]:
        call_at(fns[2], _ew_into_b, (op, a, b))
    else:
        call_at(fns[0], _ew_arrays, (op, carray_at(r[4], (n,), np.{t}), a, b))
'''
