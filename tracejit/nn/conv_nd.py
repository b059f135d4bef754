"""Conv3d, ConvTranspose1d, ConvTranspose3d, Fold and Unfold.

Same parameter shapes, state_dict keys and default initialisation as PyTorch; each
``forward`` is one call into the functional op (tracejit/ops/conv_nd.py, ops/conv.py).
"""
from __future__ import annotations

from ..ops.conv_nd import conv3d, conv_transpose1d, conv_transpose3d
from . import functional as F
from .conv import _ConvTransposeNd
from .layers import _ConvNd, _Options, conv_repr
from .module import Module, layer_class

__all__ = ["Conv3d", "ConvTranspose1d", "ConvTranspose3d", "Fold", "Unfold"]


class Conv3d(_ConvNd):
    """3-D convolution over (N, C_in, D, H, W): weight (C_out, C_in/groups, kd, kh, kw)."""
    _nd, _layer = 3, "Conv3d"

    def forward(self, input):
        input, padding = self._padded(input)
        return conv3d(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return conv_repr(self) if not isinstance(self.padding, str) else (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding!r}")


ConvTranspose1d = layer_class("ConvTranspose1d", _ConvTransposeNd, _n=1, _op=staticmethod(conv_transpose1d),
                              __doc__="Transposed 1-D convolution: weight (C_in, C_out/groups, k).")
ConvTranspose3d = layer_class("ConvTranspose3d", _ConvTransposeNd, _n=3, _op=staticmethod(conv_transpose3d),
                              __doc__="Transposed 3-D convolution: weight (C_in, C_out/groups, kd, kh, kw).")


class Unfold(_Options):
    """Sliding local blocks of (N, C, H, W) as columns (N, C*kh*kw, L) (im2col)."""
    _repr_fields = ("kernel_size", "dilation", "padding", "stride")
    _fn = staticmethod(F.unfold)

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride


class Fold(Module):
    """Columns (N, C*kh*kw, L) summed back into an image (N, C, *output_size) (col2im)."""
    _repr_fields = ("output_size", "kernel_size", "dilation", "padding", "stride")

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        size = (self.output_size,) * 2 if isinstance(self.output_size, int) else tuple(self.output_size)
        return F.fold(input, size, self.kernel_size, self.dilation, self.padding, self.stride)
