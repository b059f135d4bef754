"""Dropout layers: Dropout (elements), Dropout1d, Dropout2d and Dropout3d (whole channels),
AlphaDropout and FeatureAlphaDropout (for SELU networks); one base, each forward one op."""
from __future__ import annotations

from ..ops import activation_more as _A
from ..ops.composite import dropout
from .module import Module, layer_class

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]


class _DropoutNd(Module):
    _repr_fields = ("p", "inplace")
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 and 1, "
                             f"but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return type(self)._fn(input, self.p, self.training, self.inplace)



Dropout = layer_class("Dropout", _DropoutNd, dropout,
                      __doc__="Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p)).")
Dropout1d = layer_class("Dropout1d", _DropoutNd, _A.dropout1d)
Dropout2d = layer_class("Dropout2d", _DropoutNd, _A.dropout2d,
                        __doc__="Zeroes whole channels with probability p in training mode (scaling the rest).")
Dropout3d = layer_class("Dropout3d", _DropoutNd, _A.dropout3d)
AlphaDropout = layer_class("AlphaDropout", _DropoutNd, _A.alpha_dropout)
FeatureAlphaDropout = layer_class("FeatureAlphaDropout", _DropoutNd, _A.feature_alpha_dropout)
