"""tracejit.threads: numpy's BLAS thread count can be read and set (Linux, OpenBLAS or MKL)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from tracejit.threads import blas_threads, set_blas_threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def _needs_blas():
    n = blas_threads()
    if n is None:
        pytest.skip("numpy's BLAS is neither OpenBLAS nor MKL here")
    return n


def test_read_and_set_round_trip():
    n = _needs_blas()
    assert n >= 1
    try:
        assert set_blas_threads(1) is True
        assert blas_threads() == 1
        a = np.ones((64, 64), np.float32)
        np.testing.assert_array_equal(a @ a, np.full((64, 64), 64, np.float32))   # still works
    finally:
        set_blas_threads(n)
    assert blas_threads() == n


def test_bad_count_is_refused_and_changes_nothing():
    n = _needs_blas()
    with pytest.raises(ValueError, match="at least 1 thread"):
        set_blas_threads(0)
    assert blas_threads() == n


def test_blas_threads_set_holds_inside_and_restores_after():
    """The block's count inside, the count before after it: on a normal exit, on an
    exception, nested, and where the count already is the one asked for (nothing set)."""
    from tracejit.threads import blas_threads_set
    n = _needs_blas()
    try:
        set_blas_threads(2)
        with blas_threads_set(1):
            assert blas_threads() == 1
            with blas_threads_set(1):          # already 1: nothing to restore
                assert blas_threads() == 1
            assert blas_threads() == 1
            with blas_threads_set(2):
                assert blas_threads() == 2
            assert blas_threads() == 1
        assert blas_threads() == 2
        with pytest.raises(KeyError):
            with blas_threads_set(1):
                assert blas_threads() == 1
                raise KeyError("inside")
        assert blas_threads() == 2
        with pytest.raises(ValueError, match="at least 1 thread"):
            with blas_threads_set(0):
                pass
        assert blas_threads() == 2
    finally:
        set_blas_threads(n)
