"""Convolution layers beyond Conv2d (which lives in layers.py): Conv1d and ConvTranspose2d.

Same parameter shapes, state_dict keys and default initialisation as PyTorch; each
``forward`` is one call into the functional op (im2col/col2im + BLAS underneath).
"""
from __future__ import annotations

from ..ops import empty
from ..ops.spatial import conv1d, conv_transpose2d
from .layers import _ConvNd, _factory, _tuple, check_conv_channels, conv_repr, conv_reset
from .module import Module, layer_class
from .parameter import Parameter

__all__ = ["Conv1d", "ConvTranspose2d"]


class Conv1d(_ConvNd):
    """1-D convolution over (N, C_in, L): weight (C_out, C_in/groups, k)."""
    _nd, _layer = 1, "Conv1d"

    def forward(self, input):
        input, padding = self._padded(input)
        padding = padding if isinstance(padding, str) else padding[0]
        return conv1d(input, self.weight, self.bias, self.stride[0], padding, self.dilation[0],
                      self.groups)


class _ConvTransposeNd(Module):
    _n = 1
    _op = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__()
        name, n = type(self).__name__, self._n
        check_conv_channels(name, in_channels, out_channels, groups)
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, n, "kernel_size", name)
        self.stride = _tuple(stride, n, "stride", name)
        self.padding = _tuple(padding, n, "padding", name)
        self.output_padding = _tuple(output_padding, n, "output_padding", name)
        self.dilation = _tuple(dilation, n, "dilation", name)
        for a, s, d in zip(self.output_padding, self.stride, self.dilation):
            if a >= max(s, d):
                raise ValueError(f"{name}: output_padding {self.output_padding} must be smaller than "
                                 f"stride {self.stride} or dilation {self.dilation}")
        self.padding_mode = padding_mode
        kw = _factory(device, dtype)
        self.weight = Parameter(empty(in_channels, out_channels // groups, *self.kernel_size, **kw))
        self.bias = Parameter(empty(out_channels, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        conv_reset(self.weight, self.bias)

    def _output_padding_for(self, input, output_size):
        n = self._n
        size = tuple(output_size)[-n:]
        out = []
        for i, want in enumerate(size):
            lo = ((input.shape[-n + i] - 1) * self.stride[i] - 2 * self.padding[i]
                  + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not lo <= want < lo + self.stride[i]:
                raise ValueError(f"{type(self).__name__}: requested output size {tuple(size)} is not "
                                 f"reachable from input {tuple(input.shape)} "
                                 f"(dim {i}: {lo}..{lo + self.stride[i] - 1})")
            out.append(want - lo)
        return tuple(out)

    def forward(self, input, output_size=None):
        op = self.output_padding if output_size is None else self._output_padding_for(input, output_size)
        return type(self)._op(input, self.weight, self.bias, self.stride, self.padding, op,
                              self.groups, self.dilation)

    def extra_repr(self) -> str:
        return conv_repr(self)


ConvTranspose2d = layer_class("ConvTranspose2d", _ConvTransposeNd, _n=2, _op=staticmethod(conv_transpose2d),
                              __doc__="Transposed 2-D convolution: weight (C_in, C_out/groups, kh, kw), as in "
                                      "PyTorch.")
