"""Layers: Linear, Conv2d, Embedding, LayerNorm, activations, Flatten, Identity (Dropout is in
dropout.py, the pooling layers in pooling_nd.py).

Each ``forward`` is one call into ``nn.functional`` (the ops), so a layer adds only
its parameters, their PyTorch default initialisation and a readable repr.
"""
from __future__ import annotations

import math
import operator

from .. import dtypes as _dt
from ..ops import empty, flatten
from ..ops.activation_more import implicit_softmax_dim
from . import functional as F
from . import init
from .module import Module, layer_class
from .parameter import Parameter

__all__ = ["Identity", "Linear", "Conv2d", "Embedding", "LayerNorm", "Flatten", "ReLU", "GELU", "Tanh",
           "Sigmoid", "SiLU", "LeakyReLU", "Softplus", "Softmax", "LogSoftmax"]


def _positive_int(name: str, layer: str, v, allow_zero: bool = False) -> int:
    # numpy integers count, as in PyTorch (sizes often come from a numpy array of layer sizes)
    try:
        n = None if isinstance(v, bool) else operator.index(v)
    except TypeError:
        n = None
    if n is None or n < 0 or (n == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"{layer}: {name} must be {kind} int, got {v!r}")
    return n


def _factory(device, dtype) -> dict:
    return {"device": device, "dtype": _dt.as_dtype(dtype) if dtype is not None else None}


def _affine(m: Module, shape: tuple, affine: bool, bias: bool, device, dtype) -> None:
    """A normalization's weight and (with `bias`) bias of `shape`, or None when not
    `affine`; their values are `_reset_affine`'s."""
    kw = _factory(device, dtype)
    m.weight = Parameter(empty(*shape, **kw)) if affine else None
    m.bias = Parameter(empty(*shape, **kw)) if affine and bias else None


def _reset_affine(m: Module) -> None:
    """A normalization's weight ones and bias zeros (those it has)."""
    if m.weight is not None:
        init.ones_(m.weight)
    if getattr(m, "bias", None) is not None:
        init.zeros_(m.bias)


class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ weight.T + bias with weight of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = _positive_int("in_features", "Linear", in_features, allow_zero=True)
        self.out_features = _positive_int("out_features", "Linear", out_features, allow_zero=True)
        kw = _factory(device, dtype)
        self.weight = Parameter(empty(out_features, in_features, **kw))
        self.bias = Parameter(empty(out_features, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyTorch's default: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _tuple(v, n: int, name: str, layer: str) -> tuple:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or not all(isinstance(x, int) and not isinstance(x, bool) for x in t):
        raise ValueError(f"{layer}: {name} must be an int or a {n}-tuple of ints, got {v!r}")
    return t


def conv_reset(weight, bias) -> None:
    """PyTorch's default for every convolution: kaiming_uniform(a=sqrt(5)) on the weight,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias with the weight's fan_in."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in = weight.shape[1] * math.prod(weight.shape[2:])
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


def conv_repr(m) -> str:
    """A convolution layer's extra_repr: the arguments that differ from their defaults,
    as PyTorch prints them."""
    ones = (1,) * len(m.kernel_size)
    zeros = (0,) * len(ones)
    s = f"{m.in_channels}, {m.out_channels}, kernel_size={m.kernel_size}, stride={m.stride}"
    if m.padding != zeros:
        s += f", padding={m.padding}"
    if getattr(m, "output_padding", zeros) != zeros:
        s += f", output_padding={m.output_padding}"
    if m.dilation != ones:
        s += f", dilation={m.dilation}"
    if m.groups != 1:
        s += f", groups={m.groups}"
    if m.bias is None:
        s += ", bias=False"
    if getattr(m, "padding_mode", "zeros") != "zeros":
        s += f", padding_mode={m.padding_mode}"
    return s


def check_conv_channels(layer: str, in_channels, out_channels, groups) -> None:
    """PyTorch's checks of a convolution's channel counts and groups."""
    _positive_int("in_channels", layer, in_channels)
    _positive_int("out_channels", layer, out_channels)
    _positive_int("groups", layer, groups)
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"{layer}: in_channels ({in_channels}) and out_channels ({out_channels}) "
                         f"must both be divisible by groups ({groups})")


class _ConvNd(Module):
    """What every ConvNd shares: the constructor (PyTorch's argument checks, the attributes
    and the parameters), the default initialisation and the repr. `_to_tuple(v, name)`
    reads a size argument as an `_nd`-tuple."""
    _nd, _layer = 0, ""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__()
        layer, nd, to_tuple = self._layer, self._nd, self._to_tuple
        check_conv_channels(layer, in_channels, out_channels, groups)
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"{layer}: padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")
        if isinstance(padding, str) and padding not in ("valid", "same"):
            sizes = {1: "an int", 2: "an int, a pair", 3: "an int, a triple"}[nd]
            raise ValueError(f"{layer}: padding must be {sizes}, 'valid' or 'same', got {padding!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = to_tuple(kernel_size, "kernel_size")
        self.stride = to_tuple(stride, "stride")
        self.padding = padding if isinstance(padding, str) else to_tuple(padding, "padding")
        self.dilation = to_tuple(dilation, "dilation")
        if padding == "same" and self.stride != (1,) * nd:
            raise ValueError(f"{layer}: padding='same' is not supported for strided convolutions")
        self.padding_mode = padding_mode
        if padding == "valid":
            pairs = [(0, 0)] * nd
        elif padding == "same":
            totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in totals]
        else:
            pairs = [(p, p) for p in self.padding]
        self._reversed_padding_repeated_twice = tuple(v for pair in reversed(pairs) for v in pair)
        kw = _factory(device, dtype)
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size, **kw))
        self.bias = Parameter(empty(out_channels, **kw)) if bias else None
        self.reset_parameters()

    def _to_tuple(self, v, name: str) -> tuple:
        return _tuple(v, self._nd, name, self._layer)

    def reset_parameters(self) -> None:
        conv_reset(self.weight, self.bias)

    def _padded(self, input):
        """(input, padding) for forward: with padding_mode other than 'zeros' the input is
        padded in that mode first and the convolution itself pads nothing."""
        if self.padding_mode == "zeros":
            return input, self.padding
        return (F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode),
                (0,) * len(self.kernel_size))

    def extra_repr(self) -> str:
        return conv_repr(self)


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class Conv2d(_ConvNd):
    _nd, _layer = 2, "Conv2d"

    def forward(self, input):
        input, padding = self._padded(input)
        return F.conv2d(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors, initialised N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight=None, _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        num_embeddings = _positive_int("num_embeddings", "Embedding", num_embeddings)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse   # (gradients are dense here)
        embedding_dim = _positive_int("embedding_dim", "Embedding", embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings "
                                 f"({num_embeddings})")
            padding_idx = padding_idx % num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, **_factory(device, dtype)))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                                 f"{(num_embeddings, embedding_dim)}")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None, max_norm=None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False):
        """An Embedding holding `embeddings` (2-D) as its weight, frozen unless freeze=False."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                             f"{tuple(embeddings.shape)}")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        """Zero the padding row (PyTorch's name: subclasses' reset_parameters call it)."""
        if self.padding_idx is not None:
            from ..autograd.grad_mode import no_grad
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def _options_repr(self) -> str:
        """The lookup options that differ from their defaults, as PyTorch's repr shows them."""
        s = "" if self.max_norm is None else f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        return s

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s + self._options_repr() + (", sparse=True" if self.sparse else "")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape = shape
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine(self, shape, elementwise_affine, bias, device, dtype)
        self.reset_parameters()

    reset_parameters = _reset_affine

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class _Options(Module):
    """A layer whose forward is its op (``_fn``) of the input and of the attributes `_args`
    names, in order (those its repr shows, `_repr_fields`, unless `_args` is given)."""
    _fn = None
    _args: tuple = ()

    def forward(self, input):
        names = self._args or self._repr_fields
        return type(self)._fn(input, *[getattr(self, name) for name in names])


class Flatten(_Options):
    _repr_fields = ("start_dim", "end_dim")
    _fn = staticmethod(flatten)

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim


# ---------------------------------------------------------------- activations
class _Unary(Module):
    """An activation without options: its op (``_fn``) of the input."""
    _fn = None

    def forward(self, input):
        return type(self)._fn(input)


class _Inplace(Module):
    """An activation with PyTorch's ``inplace`` flag, shown after `_repr_fields` when set;
    forward is ``_fn(input, *options, inplace)``, the options those `_repr_fields` names."""
    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, *[getattr(self, f) for f in self._repr_fields], self.inplace)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, (super().extra_repr(), "inplace=True" if self.inplace else "")))


ReLU = layer_class("ReLU", _Inplace, F.relu)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


Tanh = layer_class("Tanh", _Unary, F.tanh)
Sigmoid = layer_class("Sigmoid", _Unary, F.sigmoid)
SiLU = layer_class("SiLU", _Inplace, F.silu)


class LeakyReLU(_Inplace):
    _repr_fields = ("negative_slope",)
    _fn = staticmethod(F.leaky_relu)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace)
        self.negative_slope = negative_slope


class Softplus(_Options):
    _repr_fields = ("beta", "threshold")
    _fn = staticmethod(F.softplus)

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold


class _SoftmaxLike(Module):
    _repr_fields = ("dim",)
    _fn = None

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        fn = type(self)._fn
        dim = self.dim if self.dim is not None else implicit_softmax_dim(fn.__name__, input.ndim)
        return fn(input, dim)


Softmax = layer_class("Softmax", _SoftmaxLike, F.softmax)
LogSoftmax = layer_class("LogSoftmax", _SoftmaxLike, F.log_softmax)
