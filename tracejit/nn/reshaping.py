"""Layers that rearrange or resize: PixelShuffle, PixelUnshuffle, ChannelShuffle, Unflatten,
UpsamplingNearest2d, UpsamplingBilinear2d."""
from __future__ import annotations

from ..ops import rearrange as _R
from .layers import _Options
from .pooling import Upsample

__all__ = ["PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Unflatten", "UpsamplingNearest2d",
           "UpsamplingBilinear2d"]


class PixelShuffle(_Options):
    """(N, C*r^2, H, W) -> (N, C, H*r, W*r)."""
    _repr_fields = ("upscale_factor",)
    _fn = staticmethod(_R.pixel_shuffle)

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor


class PixelUnshuffle(_Options):
    """(N, C, H*r, W*r) -> (N, C*r^2, H, W)."""
    _repr_fields = ("downscale_factor",)
    _fn = staticmethod(_R.pixel_unshuffle)

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor


class ChannelShuffle(_Options):
    _repr_fields = ("groups",)
    _fn = staticmethod(_R.channel_shuffle)

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups


class Unflatten(_Options):
    """Dim `dim` of the input unflattened into `unflattened_size`."""
    _repr_fields = ("dim", "unflattened_size")
    _fn = staticmethod(_R.unflatten)

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if isinstance(dim, str):
            raise NotImplementedError("Unflatten: named dimensions are not supported")
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling with ``align_corners=True``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
