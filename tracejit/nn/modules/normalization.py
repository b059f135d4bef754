"""``tracejit.nn.modules.normalization``: where ``torch.nn.modules.normalization`` keeps these layers."""
from __future__ import annotations

from ...nn import (CrossMapLRN2d, GroupNorm, LayerNorm, LocalResponseNorm, RMSNorm)  # noqa: F401

__all__ = ["CrossMapLRN2d", "GroupNorm", "LayerNorm", "LocalResponseNorm", "RMSNorm"]
