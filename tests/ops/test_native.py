"""The hand-written kernel loader (ops/native.py): when a kernel is used, when numpy is."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from tracejit.ops import native  # noqa: E402

_SOURCE = '''
from numba import njit


@njit("void(float64[::1])", cache=CACHE)
def kernel(a):
    for i in range(a.shape[0]):
        a[i] += 1.0
'''


def test_sync_mode_loads_on_first_call(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel(_SOURCE, "test_native_sync")
    fn = k.get()
    assert fn is not None and k.get() is fn
    a = np.zeros(3)
    fn(a)
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_background_mode_never_waits_on_the_first_call(monkeypatch):
    monkeypatch.delenv("TRACEJIT_COMPILE", raising=False)
    k = native.NativeKernel(_SOURCE.replace("+= 1.0", "+= 2.0"), "test_native_bg")
    assert k.get() is None and k.thread is None      # first call: numpy, nothing started
    assert k.get() is None and k.thread is None      # within _GO_AFTER_S: still nothing


def test_switched_off_even_when_loaded(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel(_SOURCE, "test_native_sync")
    assert k.get() is not None
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    assert k.get() is None


def test_a_source_that_does_not_build_stays_on_numpy(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    k = native.NativeKernel("this is not python", "test_native_bad")
    assert k.get() is None and k.failed
