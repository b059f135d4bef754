"""``tracejit.nn.modules.loss``: where ``torch.nn.modules.loss`` keeps these layers."""
from __future__ import annotations

from ...nn import (BCELoss, BCEWithLogitsLoss, CTCLoss, CosineEmbeddingLoss, CrossEntropyLoss,
                   GaussianNLLLoss, HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss,
                   MSELoss, MarginRankingLoss, MultiLabelMarginLoss,
                   MultiLabelSoftMarginLoss, MultiMarginLoss, NLLLoss, NLLLoss2d,
                   PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss, TripletMarginLoss,
                   TripletMarginWithDistanceLoss)  # noqa: F401
from ..loss import _Loss  # noqa: F401
from ..loss import _WeightedLoss  # noqa: F401

__all__ = ["BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "MarginRankingLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "SmoothL1Loss", "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss", "_Loss", "_WeightedLoss"]
