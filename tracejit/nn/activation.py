"""Activation modules beyond layers.py: ELU, SELU, CELU, Mish, Hardtanh, ReLU6, Hardsigmoid,
Hardswish, PReLU. Each holds its options (``inplace=`` accepted as in PyTorch) and calls
the functional op of the same name; PReLU owns its learnable slope(s)."""
from __future__ import annotations

from .. import ops as _ops
from . import init
from .layers import _factory, _positive_int
from .module import Module
from .parameter import Parameter

__all__ = ["ELU", "SELU", "CELU", "Mish", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "PReLU"]


class _Inplace(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ELU(_Inplace):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha

    def forward(self, input):
        return _ops.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class CELU(ELU):
    def forward(self, input):
        return _ops.celu(input, self.alpha, self.inplace)


class SELU(_Inplace):
    def forward(self, input):
        return _ops.selu(input, self.inplace)


class Mish(_Inplace):
    def forward(self, input):
        return _ops.mish(input, self.inplace)


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return _ops.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)


class Hardsigmoid(_Inplace):
    def forward(self, input):
        return _ops.hardsigmoid(input, self.inplace)


class Hardswish(_Inplace):
    def forward(self, input):
        return _ops.hardswish(input, self.inplace)


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
