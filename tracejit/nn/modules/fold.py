"""``tracejit.nn.modules.fold``: where ``torch.nn.modules.fold`` keeps these layers."""
from __future__ import annotations

from ...nn import (Fold, Unfold)  # noqa: F401

__all__ = ["Fold", "Unfold"]
