"""``tracejit.nn.modules.upsampling``: where ``torch.nn.modules.upsampling`` keeps these layers."""
from __future__ import annotations

from ...nn import (Upsample, UpsamplingBilinear2d, UpsamplingNearest2d)  # noqa: F401

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]
