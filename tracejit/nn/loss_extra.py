"""Loss and distance modules beyond loss.py: SmoothL1Loss, HuberLoss, KLDivLoss,
MarginRankingLoss, TripletMarginLoss, HingeEmbeddingLoss, CosineEmbeddingLoss,
CosineSimilarity, PairwiseDistance. Thin holders of the options of the functional ops."""
from __future__ import annotations

from .. import ops as _ops
from ..ops.losses import legacy_reduction
from .loss import _Loss
from .module import Module

__all__ = ["SmoothL1Loss", "HuberLoss", "KLDivLoss", "MarginRankingLoss", "TripletMarginLoss",
           "HingeEmbeddingLoss", "CosineEmbeddingLoss", "CosineSimilarity", "PairwiseDistance"]


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.beta = beta

    def forward(self, input, target):
        return _ops.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return _ops.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise ValueError(f"KLDivLoss: reduction must be one of ('mean', 'sum', 'none', 'batchmean'), "
                             f"got {reduction!r}")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return _ops.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class MarginRankingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input1, input2, target):
        return _ops.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: margin must be greater than 0, got {margin}")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return _ops.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                        reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input, target):
        return _ops.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input1, input2, target):
        return _ops.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return _ops.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return _ops.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
