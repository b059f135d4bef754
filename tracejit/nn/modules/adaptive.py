"""``tracejit.nn.modules.adaptive``: where ``torch.nn.modules.adaptive`` keeps this layer."""
from __future__ import annotations

from ...nn import AdaptiveLogSoftmaxWithLoss  # noqa: F401

__all__ = ["AdaptiveLogSoftmaxWithLoss"]
