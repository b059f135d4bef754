"""``tracejit.nn.modules.instancenorm``: where ``torch.nn.modules.instancenorm`` keeps these layers."""
from __future__ import annotations

from ...nn import (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LazyInstanceNorm1d,
                   LazyInstanceNorm2d, LazyInstanceNorm3d)  # noqa: F401
from ..normalization import _InstanceNorm  # noqa: F401

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d", "_InstanceNorm"]
