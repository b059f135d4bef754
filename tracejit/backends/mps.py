"""``tracejit.backends.mps``: Apple's Metal backend does not exist in tracejit."""
from __future__ import annotations


def is_available() -> bool:
    """False: tracejit runs on the CPU (numpy/numba) and CUDA (cupy) only."""
    return False


def is_built() -> bool:
    """False: there is no MPS build of tracejit."""
    return False
