"""compiler/cpu/runtime/voidptr.py: ``carray_at`` builds the C-contiguous array at an address (an int64 or
a ``void*``) as numba's ``carray`` does, inside the compiled caller: same elements, writes
reach the memory, shapes of any rank; ``claim`` / ``arrive`` hand chunk indices out once
each, from threads at once."""
import ctypes
import threading

import numpy as np
import pytest

pytest.importorskip("numba", reason="voidptr's intrinsics are numba's")

from numba import cfunc, njit  # noqa: E402

from tracejit.compiler.cpu.runtime.voidptr import arrive, carray_at, claim  # noqa: E402


@njit(cache=False)
def _double_2d(addr, m, n):
    a = carray_at(addr, (m, n), np.float32)
    a *= np.float32(2)
    return a.sum(), a.shape[0], a.shape[1], a.strides[0], a.strides[1]


@cfunc("void(voidptr)", cache=False)
def _fill(rec):
    r = carray_at(rec, (3,), np.int64)          # (address, rows, cols) at a void*
    x = carray_at(r[0], (r[1], r[2]), np.float64)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            x[i, j] = i * 10 + j


def test_an_int_address_gives_the_c_contiguous_array_there():
    buf = np.arange(12, dtype=np.float32)
    total, m, n, s0, s1 = _double_2d(buf.ctypes.data, 3, 4)
    assert (m, n, s0, s1) == (3, 4, 16, 4)
    assert np.array_equal(buf, 2 * np.arange(12, dtype=np.float32)) and total == buf.sum()


def test_a_void_pointer_and_a_record_of_addresses():
    x = np.zeros((2, 5))
    rec = np.array([x.ctypes.data, 2, 5], np.int64)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_fill.address)(rec.ctypes.data)
    np.testing.assert_array_equal(x, np.add.outer(np.arange(2) * 10, np.arange(5)))


def test_what_it_refuses_is_a_typing_error():
    import numba

    @njit(cache=False)
    def bad(addr):
        return carray_at(addr, (2,), np.float32)
    with pytest.raises(numba.core.errors.TypingError):
        bad(1.5)                                  # not an address


def test_put_array_and_table_array_round_trip_address_and_shape():
    """`put_array` writes an array's address and shape into an int64 table (what
    ``x.ctypes.data`` and ``x.shape`` give), `table_array` rebuilds the array there: the
    share entries' tables (compiler/cpu/runtime/cshares.py)."""
    from tracejit.compiler.cpu.runtime.voidptr import put_array, table_array

    @njit("void(int64[::1], Array(float32, 3, 'C', readonly=True), Array(boolean, 1, 'C', readonly=True))",
          cache=False)
    def pack(tab, x, b):
        put_array(tab, 1, x)
        put_array(tab, 5, b)

    @njit(cache=False)
    def back(tab):
        x = table_array(tab, 1, 3, np.float32)
        b = table_array(tab, 5, 1, np.bool_)
        x[1, 2, 3] = -1.0
        return x.shape, x.strides, x.sum(), b.shape, b.sum()

    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([True, False, True, True, False])
    tab = np.full(8, -7, np.int64)
    pack(tab, x, b)
    assert tab.tolist() == [-7, x.ctypes.data, 2, 3, 4, b.ctypes.data, 5, -7]
    shape, strides, total, bshape, bsum = back(tab)
    assert shape == (2, 3, 4) and strides == (48, 16, 4) and bshape == (5,) and bsum == 3
    assert x[1, 2, 3] == -1.0 and total == np.arange(24).sum() - 23 - 1   # (written through it)


@njit(nogil=True)
def _take_all(counter, n, seen):
    # claim until none is left, marking each index claimed
    while True:
        c = claim(counter)
        if c >= n:
            return
        seen[c] += 1


def test_claim_returns_the_count_before_adding_one():
    counter = np.array([5], np.int64)
    seen = np.zeros(9, np.int64)
    _take_all(counter, 9, seen)
    assert seen.tolist() == [0] * 5 + [1] * 4 and counter[0] == 10


def test_threads_claiming_at_once_take_every_index_exactly_once():
    n = 200_000
    counter = np.zeros(1, np.int64)
    seen = [np.zeros(n, np.int64) for _ in range(3)]
    threads = [threading.Thread(target=_take_all, args=(counter, n, s)) for s in seen]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    total = sum(seen)
    assert (total == 1).all()
    assert counter[0] == n + 3     # each thread's last claim found nothing


@njit(nogil=True)
def _write_then_arrive(counter, slot, value, slots, out):
    # each thread writes its slot, then counts itself out; the last one sums every slot
    slots[slot] = value
    if arrive(counter) == slots.shape[0] - 1:
        s = 0
        for k in range(slots.shape[0]):
            s += slots[k]
        out[0] = s
        out[1] += 1


def test_arrive_counts_and_the_last_arriver_sees_every_write():
    for _ in range(50):
        counter = np.zeros(1, np.int64)
        slots = np.zeros(4, np.int64)
        out = np.zeros(2, np.int64)
        threads = [threading.Thread(target=_write_then_arrive, args=(counter, k, k + 10, slots, out))
                   for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert counter[0] == 4 and out.tolist() == [10 + 11 + 12 + 13, 1]
