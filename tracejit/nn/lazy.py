"""Lazy layers: Linear, convolutions and normalizations whose input size is read from the
first input (``nn.LazyLinear(10)`` learns ``in_features`` at its first call).

A lazy layer holds `UninitializedParameter` placeholders. Its first forward builds the
layer it stands for (``cls_to_become``) with the inferred size, which draws PyTorch's
default initialisation, moves that layer's weights into the placeholders in place (an
optimizer made before the first call keeps working on them), takes over its other
attributes and becomes an instance of that class, as PyTorch's lazy modules do.
"""
from __future__ import annotations

from .conv import Conv1d, ConvTranspose2d
from .conv_nd import Conv3d, ConvTranspose1d, ConvTranspose3d
from .layers import Conv2d, Linear
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, InstanceNorm1d, InstanceNorm2d
from .normalization_more import BatchNorm3d, InstanceNorm3d
from .parameter import UninitializedBuffer, UninitializedParameter

__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
           "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d",
           "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
           "LazyInstanceNorm3d"]


class LazyModuleMixin:
    """Shared machinery: the pre-hook that materializes the layer at its first input."""

    cls_to_become: type = None
    _spatial = 0       # the input's spatial dims (0: a Linear layer's trailing features)
    _norm = False      # a normalization layer

    def _lazy_init(self, args: tuple, kwargs: dict, params: dict, buffers: tuple = ()) -> None:
        Module.__init__(self)
        self.__dict__["_lazy_args"] = (args, kwargs)
        for name, present in params.items():
            setattr(self, name, UninitializedParameter() if present else None)
        for name in buffers:
            self.register_buffer(name, UninitializedBuffer())
        self.__dict__["_lazy_hook"] = self.register_forward_pre_hook(_LazyModuleMixin_infer)

    def has_uninitialized_params(self) -> bool:
        return any(isinstance(p, UninitializedParameter) for p in self._parameters.values()) or \
            any(isinstance(b, UninitializedBuffer) for b in self._buffers.values())

    def _in_size(self, input) -> int:
        if self._spatial == 0:          # Linear: the trailing features
            return input.shape[-1]
        if self._norm:                  # normalizations: dim 1, as PyTorch reads it
            return input.shape[1]
        return input.shape[1] if input.ndim == self._spatial + 2 else input.shape[0]

    def initialize_parameters(self, input) -> None:
        args, kwargs = self.__dict__["_lazy_args"]
        real = self.cls_to_become(self._in_size(input), *args, **kwargs)
        for name, p in real._parameters.items():
            mine = self._parameters.get(name)
            if isinstance(mine, UninitializedParameter):
                mine.materialize(tuple(p.shape), p.device, p.dtype)
                mine._data[...] = p._data
            else:
                self._parameters[name] = p
        for name, b in real._buffers.items():
            self._buffers[name] = b
        keep = {"_parameters", "_buffers", "_modules", "_forward_hooks", "_forward_pre_hooks",
                "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "training"}
        for k, v in real.__dict__.items():
            if k not in keep:
                self.__dict__[k] = v
        self.__dict__["_lazy_hook"].remove()
        for k in ("_lazy_args", "_lazy_hook"):
            self.__dict__.pop(k, None)
        self.__class__ = self.cls_to_become


def _LazyModuleMixin_infer(module, args):
    module.initialize_parameters(args[0])


_LazyModuleMixin_infer._traceable = True   # shapes once, then it removes itself


def _lazy(name, base, spatial, param_names=("weight", "bias")):
    norm = base in (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d)

    def __init__(self, *args, **kwargs):
        bias = kwargs.get("bias", True) if "bias" in param_names else True
        if norm:   # PyTorch's lazy normalizations are affine and track statistics by default,
            # the instance norms included
            kwargs.setdefault("affine", True)
            kwargs.setdefault("track_running_stats", True)
        affine, track = kwargs.get("affine"), kwargs.get("track_running_stats")
        if norm:
            params = {"weight": affine, "bias": affine}
            bufs = ("running_mean", "running_var") if track else ()
        else:
            params = {"weight": True, "bias": bias}
            bufs = ()
        self._lazy_init(args, kwargs, params, bufs)
    return type(name, (LazyModuleMixin, base), {"__init__": __init__, "cls_to_become": base,
                                                "_spatial": spatial, "_norm": norm, "__module__": __name__,
                                                "__doc__": f"{base.__name__} whose input size comes "
                                                           f"from its first input."})


LazyLinear = _lazy("LazyLinear", Linear, 0)
LazyConv1d = _lazy("LazyConv1d", Conv1d, 1)
LazyConv2d = _lazy("LazyConv2d", Conv2d, 2)
LazyConv3d = _lazy("LazyConv3d", Conv3d, 3)
LazyConvTranspose1d = _lazy("LazyConvTranspose1d", ConvTranspose1d, 1)
LazyConvTranspose2d = _lazy("LazyConvTranspose2d", ConvTranspose2d, 2)
LazyConvTranspose3d = _lazy("LazyConvTranspose3d", ConvTranspose3d, 3)
LazyBatchNorm1d = _lazy("LazyBatchNorm1d", BatchNorm1d, 1)
LazyBatchNorm2d = _lazy("LazyBatchNorm2d", BatchNorm2d, 2)
LazyBatchNorm3d = _lazy("LazyBatchNorm3d", BatchNorm3d, 3)
LazyInstanceNorm1d = _lazy("LazyInstanceNorm1d", InstanceNorm1d, 1)
LazyInstanceNorm2d = _lazy("LazyInstanceNorm2d", InstanceNorm2d, 2)
LazyInstanceNorm3d = _lazy("LazyInstanceNorm3d", InstanceNorm3d, 3)
