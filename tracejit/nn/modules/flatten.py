"""``tracejit.nn.modules.flatten``: where ``torch.nn.modules.flatten`` keeps these layers."""
from __future__ import annotations

from ...nn import (Flatten, Unflatten)  # noqa: F401

__all__ = ["Flatten", "Unflatten"]
