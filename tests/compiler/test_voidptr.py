"""compiler/voidptr.py: ``carray_at`` builds the C-contiguous array at an address (an int64 or
a ``void*``) as numba's ``carray`` does, inside the compiled caller: same elements, writes
reach the memory, shapes of any rank."""
import ctypes

import numpy as np
import pytest

pytest.importorskip("numba", reason="voidptr's intrinsics are numba's")

from numba import cfunc, njit  # noqa: E402

from tracejit.compiler.voidptr import carray_at  # noqa: E402


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
