"""Spatial layers: 2-D adaptive pooling and resizing (Upsample).

The other pooling layers live in pooling_nd.py; the ops behind these are in
``tracejit/ops/spatial.py``.
"""
from __future__ import annotations

from ..ops.spatial import adaptive_avg_pool2d, adaptive_max_pool2d, interpolate
from .layers import _Options
from .module import layer_class
from .pooling_nd import _AdaptiveAvg, _AdaptiveMax

__all__ = ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample"]


AdaptiveAvgPool2d = layer_class("AdaptiveAvgPool2d", _AdaptiveAvg, adaptive_avg_pool2d,
                                __doc__="Average over PyTorch's adaptive bins to a fixed (H, W) (None keeps "
                                        "that dim).")
AdaptiveMaxPool2d = layer_class("AdaptiveMaxPool2d", _AdaptiveMax, adaptive_max_pool2d,
                                __doc__="Max over PyTorch's adaptive bins to a fixed (H, W).")


class Upsample(_Options):
    """Resize with ``F.interpolate`` (nearest, linear, bilinear, bicubic, trilinear, area)."""
    _args = ("size", "scale_factor", "mode", "align_corners", "recompute_scale_factor")
    _fn = staticmethod(interpolate)

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def extra_repr(self) -> str:
        s = f"size={self.size}" if self.size is not None else f"scale_factor={self.scale_factor}"
        return s + f", mode={self.mode!r}"
