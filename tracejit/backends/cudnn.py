"""``tracejit.backends.cudnn``: PyTorch's cuDNN switches, accepted as no-ops.

tracejit's convolutions are im2col + BLAS (cuBLAS through cupy on a GPU), never cuDNN,
so ``enabled``, ``benchmark``, ``deterministic`` and ``allow_tf32`` are plain module
attributes a program may read and set; they change nothing. `is_available` is False.
"""
from __future__ import annotations

import contextlib

enabled: bool = True
benchmark: bool = False
deterministic: bool = False
allow_tf32: bool = True
benchmark_limit: int = 10


def is_available() -> bool:
    """False: tracejit does not use cuDNN."""
    return False


def version():
    """None, as PyTorch answers when cuDNN is absent."""
    return None


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=True, **_):
    """Set the (no-op) flags for a block, restoring them after, like PyTorch's."""
    g = globals()
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    old = {n: g[n] for n in names}
    g.update(dict(zip(names, (enabled, benchmark, deterministic, allow_tf32))))
    try:
        yield
    finally:
        g.update(old)
