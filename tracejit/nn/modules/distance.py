"""``tracejit.nn.modules.distance``: where ``torch.nn.modules.distance`` keeps these layers."""
from __future__ import annotations

from ...nn import (CosineSimilarity, PairwiseDistance)  # noqa: F401

__all__ = ["CosineSimilarity", "PairwiseDistance"]
