"""More activation modules: GLU, Hardshrink, Softshrink, Tanhshrink, Softsign, Threshold,
LogSigmoid, Softmin, Softmax2d, RReLU. Each calls the functional op of the same name."""
from __future__ import annotations

from ..errors import ShapeError
from ..ops import activation_more as _A
from ..ops.composite import logsigmoid, softmax
from .layers import _Inplace, _Options, _Unary
from .module import Module, layer_class

__all__ = ["GLU", "Hardshrink", "Softshrink", "Tanhshrink", "Softsign", "Threshold", "LogSigmoid",
           "Softmin", "Softmax2d", "RReLU"]


class GLU(_Options):
    _repr_fields = ("dim",)
    _fn = staticmethod(_A.glu)

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim


class Hardshrink(_Options):
    _args = ("lambd",)
    _fn = staticmethod(_A.hardshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self) -> str:
        return f"{self.lambd}"


Softshrink = layer_class("Softshrink", Hardshrink, _A.softshrink)
Tanhshrink = layer_class("Tanhshrink", _Unary, _A.tanhshrink)
Softsign = layer_class("Softsign", _Unary, _A.softsign)
LogSigmoid = layer_class("LogSigmoid", _Unary, logsigmoid)


class Threshold(_Inplace):
    _repr_fields = ("threshold", "value")
    _fn = staticmethod(_A.threshold)

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(inplace)
        self.threshold, self.value = threshold, value


class Softmin(_Options):
    _repr_fields = ("dim",)
    _fn = staticmethod(_A.softmin)

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim


class Softmax2d(Module):
    """Softmax over the channels of (N, C, H, W) or (C, H, W)."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ShapeError(f"Softmax2d: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
        return softmax(input, -3)


class RReLU(_Inplace):
    _repr_fields = ("lower", "upper")

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__(inplace)
        self.lower, self.upper = lower, upper

    def forward(self, input):
        return _A.rrelu(input, self.lower, self.upper, self.training, self.inplace)
