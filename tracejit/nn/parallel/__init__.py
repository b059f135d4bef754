"""``tracejit.nn.parallel``: data parallelism across processes (see `DistributedDataParallel`)."""
from __future__ import annotations

from .data_parallel import DataParallel
from .distributed import DistributedDataParallel

DDP = DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel", "DDP"]
