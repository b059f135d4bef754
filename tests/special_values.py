"""Special float values written into a test array, and the environment of eager-kernel tests."""
from __future__ import annotations

import numpy as np
import pytest


def with_specials(x: np.ndarray) -> np.ndarray:
    """`x` (C-contiguous, written in place and returned) with -0.0, inf, -inf and nan at
    spread positions."""
    flat = x.reshape(-1)
    flat[::7] = -0.0
    flat[3::11] = np.inf
    flat[5::13] = -np.inf
    flat[6::29] = np.nan
    return x


@pytest.fixture
def eager_kernels_sync(monkeypatch):
    """Eager kernels on, compile mode sync (only what is on disk loads in a call)."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "1")
