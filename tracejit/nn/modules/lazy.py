"""``tracejit.nn.modules.lazy``: where ``torch.nn.modules.lazy`` keeps these layers."""
from __future__ import annotations

from ...nn import (LazyModuleMixin)  # noqa: F401
from ..lazy import LazyModuleMixin  # noqa: F401

__all__ = ["LazyModuleMixin", "LazyModuleMixin"]
