"""Weight initialisers, with PyTorch's names, formulas and fan conventions.

Each fills its tensor in place under ``no_grad`` (the same Parameter object keeps
its identity) and returns it. Random numbers come from tracejit's global generator,
so ``tracejit.manual_seed`` makes initialisation reproducible.
"""
from __future__ import annotations

import math

from ..errors import user_stacklevel
from ..autograd.grad_mode import no_grad
from ..tensor import Tensor

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "eye_"]


def _check(tensor, fn: str) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init.{fn}: expected a Tensor, got {type(tensor).__name__}")


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (PyTorch's table)."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(tensor: Tensor, fn: str) -> tuple[int, int]:
    if tensor.ndim < 2:
        raise ValueError(f"nn.init.{fn}: fan in and fan out can not be computed for a tensor with "
                         f"fewer than 2 dimensions (shape {tuple(tensor.shape)})")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    return _fans(tensor, "_calculate_fan_in_and_fan_out")


def _fan(tensor: Tensor, mode: str, fn: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"nn.init.{fn}: mode {mode!r} not supported, use 'fan_in' or 'fan_out'")
    fan_in, fan_out = _fans(tensor, fn)
    return fan_in if mode == "fan_in" else fan_out


def _set(tensor: Tensor, values) -> Tensor:
    """`tensor` set in place, unrecorded, to the numpy `values` (in its shape, dtype, device)."""
    from ..ops.creation import tensor as _tensor
    with no_grad():
        return tensor.copy_(_tensor(values.reshape(tuple(tensor.shape)), dtype=tensor.dtype, device=tensor.device))


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    _check(tensor, "uniform_")
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    _check(tensor, "normal_")
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def constant_(tensor: Tensor, val: float) -> Tensor:
    _check(tensor, "constant_")
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def eye_(tensor: Tensor) -> Tensor:
    _check(tensor, "eye_")
    if tensor.ndim != 2:
        raise ValueError(f"nn.init.eye_: only 2-D tensors are supported, got shape {tuple(tensor.shape)}")
    from ..ops.creation import eye
    with no_grad():
        return tensor.copy_(eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    _check(tensor, "xavier_uniform_")
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    _check(tensor, "xavier_normal_")
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str, name: str):
    """He et al.'s standard deviation, or None for an empty tensor (nothing to fill)."""
    _check(tensor, name)
    if 0 in tensor.shape:
        return None
    return calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode, name))


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_")
    return tensor if std is None else normal_(tensor, 0.0, std, generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """Normal(mean, std) restricted to [a, b], by redrawing the samples that fall outside."""
    _check(tensor, "trunc_normal_")
    if not a < b:
        raise ValueError(f"nn.init.trunc_normal_: need a < b, got a={a}, b={b}")
    # The acceptance rate is the normal mass inside [a, b]; refuse hopeless cases
    # instead of looping forever.
    lo, hi = (a - mean) / std, (b - mean) / std
    mass = 0.5 * (math.erf(hi / math.sqrt(2)) - math.erf(lo / math.sqrt(2)))
    if mass < 1e-4:
        raise ValueError(f"nn.init.trunc_normal_: [a, b] = [{a}, {b}] holds too little of "
                         f"Normal({mean}, {std}) to sample from")
    from ..ops.random import drawing_from, randn
    import numpy as np
    with no_grad(), drawing_from(generator, "trunc_normal_"):
        n = tensor.numel()
        vals = np.empty(n, dtype=np.float64)
        filled = 0
        while filled < n:
            draw = randn(max(2 * (n - filled), 16), dtype="float64")._host() * std + mean
            draw = draw[(draw >= a) & (draw <= b)][: n - filled]
            vals[filled:filled + draw.size] = draw
            filled += draw.size
    return _set(tensor, vals)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix from the QR decomposition of a normal draw, rows flattened
    past dim 0 (PyTorch's recipe, the signs of R's diagonal folded into Q)."""
    _check(tensor, "orthogonal_")
    if tensor.ndim < 2:
        raise ValueError("nn.init.orthogonal_: only tensors with 2 or more dimensions are supported")
    import numpy as np

    from ..ops.random import drawing_from, randn
    if tensor.numel() == 0:
        return tensor
    rows, cols = tensor.shape[0], tensor.numel() // tensor.shape[0]
    with drawing_from(generator, "orthogonal_"):
        flat = randn(rows, cols, dtype="float64")._host()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _set(tensor, gain * q)


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """N(0, std) entries with a fraction `sparsity` of each column set to zero."""
    _check(tensor, "sparse_")
    if tensor.ndim != 2:
        raise ValueError("nn.init.sparse_: only 2-D tensors are supported")
    from ..ops.random import drawing_from, randn, randperm
    rows, cols = tensor.shape
    zeros = int(math.ceil(sparsity * rows))
    with drawing_from(generator, "sparse_"):
        vals = randn(rows, cols, dtype="float64")._host() * std
        for c in range(cols):
            vals[randperm(rows)._host()[:zeros], c] = 0
    return _set(tensor, vals)


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """The identity convolution: a 1 at the kernel's centre for each in/out channel pair."""
    _check(tensor, "dirac_")
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("nn.init.dirac_: only 3, 4 or 5-D tensors are supported")
    import numpy as np

    shape = tuple(tensor.shape)
    if shape[0] % groups:
        raise ValueError("nn.init.dirac_: dim 0 must be divisible by groups")
    out_per = shape[0] // groups
    w = np.zeros(shape)
    centre = tuple(s // 2 for s in shape[2:])
    for g in range(groups):
        for d in range(min(out_per, shape[1])):
            w[(g * out_per + d, d) + centre] = 1
    return _set(tensor, w)


def _deprecated(fn):
    def old(*args, **kwargs):
        import warnings
        warnings.warn(f"nn.init.{fn.__name__[:-1]} is now deprecated in favor of nn.init.{fn.__name__}.",
                      FutureWarning, stacklevel=user_stacklevel())
        return fn(*args, **kwargs)
    old.__name__ = fn.__name__[:-1]
    return old


uniform, normal, constant, eye, dirac = (_deprecated(f) for f in (uniform_, normal_, constant_, eye_, dirac_))
xavier_uniform, xavier_normal = _deprecated(xavier_uniform_), _deprecated(xavier_normal_)
kaiming_uniform, kaiming_normal = _deprecated(kaiming_uniform_), _deprecated(kaiming_normal_)
orthogonal, sparse = _deprecated(orthogonal_), _deprecated(sparse_)
__all__ += ["orthogonal_", "sparse_", "dirac_", "uniform", "normal", "constant", "eye", "dirac",
            "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse"]
