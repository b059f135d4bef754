"""``tracejit.nn.modules.sparse``: where ``torch.nn.modules.sparse`` keeps these layers."""
from __future__ import annotations

from ...nn import (Embedding, EmbeddingBag)  # noqa: F401

__all__ = ["Embedding", "EmbeddingBag"]
