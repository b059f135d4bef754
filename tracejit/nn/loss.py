"""Loss modules: thin wrappers holding the options of the functional losses."""
from __future__ import annotations

from ..ops.losses import legacy_reduction
from . import functional as F
from .module import Module, layer_class

__all__ = ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss",
           "LinearCrossEntropyLoss"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Module):
    """A loss with PyTorch's ``reduction`` (or its deprecated ``size_average``/``reduce``,
    by keyword); forward is ``_fn(input, target, reduction=...)`` with the attributes
    `_options` names passed by keyword too, unless a subclass takes other inputs."""
    _fn = None
    _options: tuple = ()
    _reductions = _REDUCTIONS

    def __init__(self, reduction: str = "mean", *, size_average=None, reduce=None):
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in self._reductions:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {self._reductions}, "
                             f"got {reduction!r}")
        self.reduction = reduction

    def forward(self, input, target):
        return type(self)._fn(input, target, reduction=self.reduction,
                              **{name: getattr(self, name) for name in self._options})


class _WeightedLoss(_Loss):
    _options = ("weight",)

    def __init__(self, weight=None, reduction: str = "mean", *, size_average=None, reduce=None):
        super().__init__(reduction, size_average=size_average, reduce=reduce)
        self.register_buffer("weight", weight)


MSELoss = layer_class("MSELoss", _Loss, F.mse_loss)
L1Loss = layer_class("L1Loss", _Loss, F.l1_loss)


class CrossEntropyLoss(_WeightedLoss):
    _fn = staticmethod(F.cross_entropy)
    _options = ("weight", "ignore_index", "label_smoothing")

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, *, size_average=None, reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}")
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing


class LinearCrossEntropyLoss(_WeightedLoss):
    """``linear_cross_entropy`` with its projection as a `Linear` (``self.linear``) to
    num_classes * prod(out_features) outputs."""

    def __init__(self, in_features: int, num_classes: int, *, out_features: tuple = (), bias: bool = False,
                 device=None, dtype=None, reduction: str = "mean", weight=None, ignore_index=None,
                 label_smoothing: float = 0.0, options=None):
        from .layers import Linear
        super().__init__(weight, reduction)
        self.in_features, self.num_classes, self.out_features = in_features, num_classes, tuple(out_features)
        self.ignore_index, self.label_smoothing, self.options = ignore_index, label_smoothing, options
        n = num_classes
        for d in self.out_features:
            n *= d
        self.linear = Linear(in_features, n, bias=bias, device=device, dtype=dtype)

    def forward(self, input, target):
        classes = (self.num_classes,) + self.out_features
        bias = self.linear.bias
        return F.linear_cross_entropy(
            input, self.linear.weight.reshape(classes + (self.in_features,)), target,
            linear_bias=None if bias is None else bias.reshape(classes), weight=self.weight,
            reduction=self.reduction, ignore_index=self.ignore_index, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    _fn = staticmethod(F.nll_loss)
    _options = ("weight", "ignore_index")

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean", *, size_average=None,
                 reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        self.ignore_index = ignore_index


BCELoss = layer_class("BCELoss", _WeightedLoss, F.binary_cross_entropy)


class BCEWithLogitsLoss(_WeightedLoss):
    _fn = staticmethod(F.binary_cross_entropy_with_logits)
    _options = ("weight", "pos_weight")

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None, *, size_average=None, reduce=None):
        super().__init__(weight, reduction, size_average=size_average, reduce=reduce)
        self.register_buffer("pos_weight", pos_weight)
