"""``tracejit.nn.modules.pixelshuffle``: where ``torch.nn.modules.pixelshuffle`` keeps these layers."""
from __future__ import annotations

from ...nn import (PixelShuffle, PixelUnshuffle)  # noqa: F401

__all__ = ["PixelShuffle", "PixelUnshuffle"]
