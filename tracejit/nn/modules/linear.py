"""``tracejit.nn.modules.linear``: where ``torch.nn.modules.linear`` keeps these layers."""
from __future__ import annotations

from ...nn import (Bilinear, Identity, LazyLinear, Linear)  # noqa: F401


class NonDynamicallyQuantizableLinear(Linear):
    """Linear under the name MultiheadAttention's output projection has in PyTorch."""

__all__ = ["Bilinear", "Identity", "LazyLinear", "Linear", "NonDynamicallyQuantizableLinear"]
