"""``tracejit.nn.modules.transformer``: where ``torch.nn.modules.transformer`` keeps these layers."""
from __future__ import annotations

from ...nn import (Transformer, TransformerDecoder, TransformerDecoderLayer,
                   TransformerEncoder, TransformerEncoderLayer)  # noqa: F401

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer"]
