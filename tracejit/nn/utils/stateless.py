"""``nn.utils.stateless.functional_call``: PyTorch's older name for
``tracejit.func.functional_call``."""
from __future__ import annotations

from ...func.functional_call import functional_call

__all__ = ["functional_call"]
