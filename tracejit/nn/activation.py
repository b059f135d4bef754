"""Activation modules beyond layers.py: ELU, SELU, CELU, Mish, Hardtanh, ReLU6, Hardsigmoid,
Hardswish, PReLU. Each holds its options (``inplace=`` accepted as in PyTorch) and calls
the functional op of the same name; PReLU owns its learnable slope(s)."""
from __future__ import annotations

from .. import ops as _ops
from . import init
from .layers import _factory, _Inplace, _positive_int
from .module import Module, layer_class
from .parameter import Parameter

__all__ = ["ELU", "SELU", "CELU", "Mish", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "PReLU"]


class ELU(_Inplace):
    _repr_fields = ("alpha",)
    _fn = staticmethod(_ops.elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha


CELU = layer_class("CELU", ELU, _ops.celu)
SELU = layer_class("SELU", _Inplace, _ops.selu)
Mish = layer_class("Mish", _Inplace, _ops.mish)


class Hardtanh(_Inplace):
    _repr_fields = ("min_val", "max_val")
    _fn = staticmethod(_ops.hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
        super().__init__(inplace)
        self.min_val, self.max_val = min_val, max_val


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)


Hardsigmoid = layer_class("Hardsigmoid", _Inplace, _ops.hardsigmoid)
Hardswish = layer_class("Hardswish", _Inplace, _ops.hardswish)


class PReLU(Module):
    """x for x > 0, a * x otherwise, with ``num_parameters`` learnable slopes (1 or channels)."""
    _repr_fields = ("num_parameters",)

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = _positive_int("num_parameters", "PReLU", num_parameters)
        self.init = init
        self.weight = Parameter(_ops.empty(num_parameters, **_factory(device, dtype)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input):
        return _ops.prelu(input, self.weight)
