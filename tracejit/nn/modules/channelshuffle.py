"""``tracejit.nn.modules.channelshuffle``: where ``torch.nn.modules.channelshuffle`` keeps these layers."""
from __future__ import annotations

from ...nn import (ChannelShuffle)  # noqa: F401

__all__ = ["ChannelShuffle"]
