"""Layers that rearrange or resize: PixelShuffle, PixelUnshuffle, ChannelShuffle, Unflatten,
UpsamplingNearest2d, UpsamplingBilinear2d."""
from __future__ import annotations

from ..ops import rearrange as _R
from .module import Module
from .pooling import Upsample

__all__ = ["PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "Unflatten", "UpsamplingNearest2d",
           "UpsamplingBilinear2d"]


class PixelShuffle(Module):
    """(N, C*r^2, H, W) -> (N, C, H*r, W*r)."""
    _repr_fields = ("upscale_factor",)

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return _R.pixel_shuffle(input, self.upscale_factor)


class PixelUnshuffle(Module):
    """(N, C, H*r, W*r) -> (N, C*r^2, H, W)."""
    _repr_fields = ("downscale_factor",)

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return _R.pixel_unshuffle(input, self.downscale_factor)


class ChannelShuffle(Module):
    _repr_fields = ("groups",)

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return _R.channel_shuffle(input, self.groups)


class Unflatten(Module):
    """Dim `dim` of the input unflattened into `unflattened_size`."""
    _repr_fields = ("dim", "unflattened_size")

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if isinstance(dim, str):
            raise NotImplementedError("Unflatten: named dimensions are not supported")
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        return _R.unflatten(input, self.dim, self.unflattened_size)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling with ``align_corners=True``."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
