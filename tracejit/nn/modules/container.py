"""``tracejit.nn.modules.container``: where ``torch.nn.modules.container`` keeps these layers."""
from __future__ import annotations

from ...nn import (Container, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential)  # noqa: F401

__all__ = ["Container", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]
