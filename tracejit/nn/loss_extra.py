"""Loss and distance modules beyond loss.py: SmoothL1Loss, HuberLoss, KLDivLoss,
MarginRankingLoss, TripletMarginLoss, HingeEmbeddingLoss, CosineEmbeddingLoss,
CosineSimilarity, PairwiseDistance. Thin holders of the options of the functional ops."""
from __future__ import annotations

from .. import ops as _ops
from ..ops.losses import legacy_reduction
from .loss import _Loss
from .module import Module, layer_class

__all__ = ["SmoothL1Loss", "HuberLoss", "KLDivLoss", "MarginRankingLoss", "TripletMarginLoss",
           "HingeEmbeddingLoss", "CosineEmbeddingLoss", "CosineSimilarity", "PairwiseDistance"]


class SmoothL1Loss(_Loss):
    _fn, _options = staticmethod(_ops.smooth_l1_loss), ("beta",)

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.beta = beta


class HuberLoss(_Loss):
    _fn, _options = staticmethod(_ops.huber_loss), ("delta",)

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta


class KLDivLoss(_Loss):
    _fn, _options = staticmethod(_ops.kl_div), ("log_target",)
    _reductions = ("mean", "sum", "none", "batchmean")

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.log_target = log_target


class MarginRankingLoss(_Loss):
    _fn = staticmethod(_ops.margin_ranking_loss)

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input1, input2, target):
        return type(self)._fn(input1, input2, target, self.margin, reduction=self.reduction)


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
    _fn, _options = staticmethod(_ops.hinge_embedding_loss), ("margin",)

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.margin = margin


CosineEmbeddingLoss = layer_class("CosineEmbeddingLoss", MarginRankingLoss,
                                  _ops.cosine_embedding_loss)


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
