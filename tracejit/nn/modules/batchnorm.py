"""``tracejit.nn.modules.batchnorm``: where ``torch.nn.modules.batchnorm`` keeps these layers."""
from __future__ import annotations

from ...nn import (BatchNorm1d, BatchNorm2d, BatchNorm3d, LazyBatchNorm1d, LazyBatchNorm2d,
                   LazyBatchNorm3d, SyncBatchNorm)  # noqa: F401
from ..normalization import _BatchNorm  # noqa: F401
from ..normalization import _NormBase  # noqa: F401

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "SyncBatchNorm", "_BatchNorm", "_NormBase"]
