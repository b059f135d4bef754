"""Spatial layers: adaptive pooling, resizing (Upsample) and channel dropout (Dropout2d).

MaxPool2d and AvgPool2d live in layers.py; the ops behind all of them are in
``tracejit/ops/spatial.py``.
"""
from __future__ import annotations

from ..ops.spatial import adaptive_avg_pool2d, adaptive_max_pool2d, dropout2d, interpolate
from .module import Module
from .pooling_nd import _AdaptiveAvg, _AdaptiveMax

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample", "Dropout2d"]


class AdaptiveAvgPool2d(_AdaptiveAvg):
    """Average over PyTorch's adaptive bins to a fixed (H, W) (None keeps that dim)."""
    _fn = staticmethod(adaptive_avg_pool2d)


class AdaptiveMaxPool2d(_AdaptiveMax):
    """Max over PyTorch's adaptive bins to a fixed (H, W)."""
    _fn = staticmethod(adaptive_max_pool2d)


class Upsample(Module):
    """Resize with ``F.interpolate`` (nearest, linear, bilinear, bicubic, trilinear, area)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self) -> str:
        s = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return s + f", mode={self.mode!r}"


class Dropout2d(Module):
    """Zeroes whole channels with probability p in training mode (scaling the rest)."""
    _repr_fields = ("p", "inplace")

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return dropout2d(input, self.p, self.training, self.inplace)
