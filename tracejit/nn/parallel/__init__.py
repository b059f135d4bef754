"""``tracejit.nn.parallel``: data parallelism across processes (see `DistributedDataParallel`)."""
from __future__ import annotations

from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["DistributedDataParallel", "DDP"]
