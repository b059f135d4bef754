"""``tracejit.nn.modules.dropout``: where ``torch.nn.modules.dropout`` keeps these layers."""
from __future__ import annotations

from ...nn import (AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout)  # noqa: F401
from ..dropout import _DropoutNd  # noqa: F401

__all__ = ["AlphaDropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout", "_DropoutNd"]
