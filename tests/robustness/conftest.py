"""Robustness tests compile many kernels: keep them in one session-wide temporary disk
cache (never the user's), so every test reuses what the others compiled."""
from __future__ import annotations

import pytest

from differential import kernel_cache_at


@pytest.fixture(autouse=True, scope="module")
def _kernels_in_session_tmp(tmp_path_factory):
    with kernel_cache_at(tmp_path_factory.getbasetemp() / "tracejit-kernels"):
        yield
