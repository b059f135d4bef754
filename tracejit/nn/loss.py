"""Loss modules: thin wrappers holding the options of the functional losses."""
from __future__ import annotations

from ..ops.losses import legacy_reduction
from . import functional as F
from .module import Module, layer_class

__all__ = ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Module):
    """A loss with PyTorch's ``reduction`` (or its deprecated ``size_average``/``reduce``,
    by keyword); forward is ``_fn(input, target, reduction=...)`` unless a subclass passes
    more options."""
    _fn = None

    def __init__(self, reduction: str = "mean", *, size_average=None, reduce=None):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction

    def forward(self, input, target):
        return type(self)._fn(input, target, reduction=self.reduction)


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, reduction: str = "mean", *, size_average=None, reduce=None):
        super().__init__(reduction, size_average=size_average, reduce=reduce)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return type(self)._fn(input, target, weight=self.weight, reduction=self.reduction)


MSELoss = layer_class("MSELoss", _Loss, F.mse_loss)
L1Loss = layer_class("L1Loss", _Loss, F.l1_loss)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, *, size_average=None, reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean", *, size_average=None,
                 reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


BCELoss = layer_class("BCELoss", _WeightedLoss, F.binary_cross_entropy)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None, *, size_average=None, reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight,
                                                  reduction=self.reduction, pos_weight=self.pos_weight)
