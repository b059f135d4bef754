"""``tracejit.nn.modules.module``: where ``torch.nn.modules.module`` keeps these layers."""
from __future__ import annotations

from ...nn import (Module)  # noqa: F401

__all__ = ["Module"]
