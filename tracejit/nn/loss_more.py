"""The rest of PyTorch's loss modules: GaussianNLLLoss, PoissonNLLLoss, SoftMarginLoss,
MultiLabelSoftMarginLoss, MultiLabelMarginLoss, MultiMarginLoss,
TripletMarginWithDistanceLoss, CTCLoss and NLLLoss2d (NLLLoss's old name). Each holds its
options and calls the functional loss (tracejit/ops/losses_more.py)."""
from __future__ import annotations

from ..ops import losses_more as _L
from ..ops.losses import legacy_reduction
from .loss import NLLLoss, _Loss, _WeightedLoss
from .module import layer_class

__all__ = ["GaussianNLLLoss", "PoissonNLLLoss", "SoftMarginLoss", "MultiLabelSoftMarginLoss",
           "MultiLabelMarginLoss", "MultiMarginLoss", "TripletMarginWithDistanceLoss", "CTCLoss",
           "NLLLoss2d"]


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return _L.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean"):
        super().__init__(legacy_reduction(size_average, reduce, reduction))
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return _L.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                   eps=self.eps, reduction=self.reduction)


SoftMarginLoss = layer_class("SoftMarginLoss", _Loss, _L.soft_margin_loss)
MultiLabelSoftMarginLoss = layer_class("MultiLabelSoftMarginLoss", _WeightedLoss, _L.multilabel_soft_margin_loss)
MultiLabelMarginLoss = layer_class("MultiLabelMarginLoss", _Loss, _L.multilabel_margin_loss)


class MultiMarginLoss(_WeightedLoss):
    _fn, _options = staticmethod(_L.multi_margin_loss), ("p", "margin", "weight")

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, legacy_reduction(size_average, reduce, reduction))
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p == 1 and p == 2 are supported, got {p}")
        self.p, self.margin = p, margin


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function=None, margin: float = 1.0, swap: bool = False,
                 reduction: str = "mean"):
        super().__init__(reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: margin must be positive, got {margin}")
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return _L.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                    distance_function=self.distance_function,
                                                    margin=self.margin, swap=self.swap,
                                                    reduction=self.reduction)


class CTCLoss(_Loss):
    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return _L.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                           self.zero_infinity)


class NLLLoss2d(NLLLoss):
    """NLLLoss under its old name (for (N, C, H, W) inputs, which NLLLoss takes too)."""
