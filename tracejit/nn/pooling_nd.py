"""Max and average pooling layers in one to three dimensions, L^p pooling, max unpooling and
fractional max pooling (the 2-D adaptive ones are in pooling.py): one base per kind, each
forward one call into tracejit/ops/pooling_nd.py or pool_fractional.py (the 2-D max and
average pools: ops/composite.py's fast path)."""
from __future__ import annotations

from ..ops import pool_fractional as _F
from ..ops import pooling_nd as _P
from ..ops.composite import avg_pool2d, max_pool2d
from .layers import _Options
from .module import Module, layer_class

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool3d", "LPPool1d",
           "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d",
           "FractionalMaxPool3d"]


class _MaxPoolNd(_Options):
    _repr_fields = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
    _args = _repr_fields[:4] + ("ceil_mode", "return_indices")

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode


class _AvgPoolNd(_Options):
    _repr_fields = ("kernel_size", "stride", "padding")
    _args = _repr_fields + ("ceil_mode", "count_include_pad", "divisor_override")

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override


class _AdaptiveAvg(_Options):
    _repr_fields = ("output_size",)

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size


class _AdaptiveMax(_Options):
    _repr_fields = ("output_size",)
    _args = ("output_size", "return_indices")

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices


class _LPPool(Module):
    _repr_fields = ("norm_type", "kernel_size", "stride", "ceil_mode")
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class _MaxUnpool(Module):
    _repr_fields = ("kernel_size", "stride", "padding")
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        return type(self)._fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)


class _FractionalMaxPool(Module):
    _fn, _n = None, 0

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None):
        super().__init__()
        n, name = self._n, type(self).__name__
        self.kernel_size = _F._tuple(kernel_size, n, "kernel_size", name)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = None if output_size is None else _F._tuple(output_size, n, "output_size", name)
        self.output_ratio = None if output_ratio is None else _F._tuple(output_ratio, n, "output_ratio", name)
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.output_size, self.output_ratio,
                              self.return_indices, _random_samples=self._random_samples)


MaxPool1d = layer_class("MaxPool1d", _MaxPoolNd, _P.max_pool1d)
MaxPool2d = layer_class("MaxPool2d", _MaxPoolNd, max_pool2d)
MaxPool3d = layer_class("MaxPool3d", _MaxPoolNd, _P.max_pool3d)
AvgPool1d = layer_class("AvgPool1d", _AvgPoolNd, _P.avg_pool1d)
AvgPool2d = layer_class("AvgPool2d", _AvgPoolNd, avg_pool2d)
AvgPool3d = layer_class("AvgPool3d", _AvgPoolNd, _P.avg_pool3d)
AdaptiveAvgPool1d = layer_class("AdaptiveAvgPool1d", _AdaptiveAvg, _P.adaptive_avg_pool1d)
AdaptiveAvgPool3d = layer_class("AdaptiveAvgPool3d", _AdaptiveAvg, _P.adaptive_avg_pool3d)
AdaptiveMaxPool1d = layer_class("AdaptiveMaxPool1d", _AdaptiveMax, _P.adaptive_max_pool1d)
AdaptiveMaxPool3d = layer_class("AdaptiveMaxPool3d", _AdaptiveMax, _P.adaptive_max_pool3d)
LPPool1d = layer_class("LPPool1d", _LPPool, _P.lp_pool1d)
LPPool2d = layer_class("LPPool2d", _LPPool, _P.lp_pool2d)
LPPool3d = layer_class("LPPool3d", _LPPool, _P.lp_pool3d)
MaxUnpool1d = layer_class("MaxUnpool1d", _MaxUnpool, _P.max_unpool1d)
MaxUnpool2d = layer_class("MaxUnpool2d", _MaxUnpool, _P.max_unpool2d)
MaxUnpool3d = layer_class("MaxUnpool3d", _MaxUnpool, _P.max_unpool3d)
FractionalMaxPool2d = layer_class("FractionalMaxPool2d", _FractionalMaxPool, _F.fractional_max_pool2d,
                                  _n=2)
FractionalMaxPool3d = layer_class("FractionalMaxPool3d", _FractionalMaxPool, _F.fractional_max_pool3d,
                                  _n=3)
