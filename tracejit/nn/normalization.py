"""Normalization layers: BatchNorm1d/2d, GroupNorm, InstanceNorm1d/2d (PyTorch's semantics).

Parameters and buffers have PyTorch's names, shapes and initial values (weight 1,
bias 0, running_mean 0, running_var 1, int64 num_batches_tracked), so a PyTorch
state_dict loads by name. Each ``forward`` is one call into the functional op.
"""
from __future__ import annotations

from .. import dtypes as _dt
from .. import ops as _ops
from ..autograd.grad_mode import no_grad
from ..errors import ShapeError, user_stacklevel
from ..ops.normalization import batch_norm, check_dtypes, group_norm, instance_norm
from .layers import _affine, _factory, _positive_int, _reset_affine
from .module import Module, layer_class

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d"]


class _NormBase(Module):
    """Holds weight/bias (affine) and running statistics (track_running_stats)."""

    _ranks: tuple = ()
    _version = 2   # (version 2 added num_batches_tracked; state_dict metadata records it)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None, dtype=None, *,
                 bias: bool = True):
        super().__init__()
        name = type(self).__name__
        _positive_int("num_features", name, num_features)
        if momentum is not None and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{name}: momentum must be in [0, 1] or None, got {momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = _factory(device, dtype)
        _affine(self, (num_features,), affine, bias, device, dtype)
        track = track_running_stats
        self.register_buffer("running_mean", _ops.zeros(num_features, **kw) if track else None)
        self.register_buffer("running_var", _ops.ones(num_features, **kw) if track else None)
        self.register_buffer("num_batches_tracked",
                             _ops.zeros((), dtype=_dt.int64, device=kw["device"]) if track else None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def _load_from_state_dict(self, state_dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list, unexpected_keys: list, error_msgs: list) -> None:
        # A checkpoint older than version 2 (or one without metadata, a plain dict) may have
        # no num_batches_tracked: the layer keeps its own, as PyTorch's does.
        version = local_metadata.get("version")
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            state_dict[key] = self.num_batches_tracked
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def _check_input(self, input) -> None:
        name = type(self).__name__
        if input.ndim not in self._ranks:
            ranks = " or ".join(f"{r}D" for r in self._ranks)
            raise ShapeError(f"{name}: expected {ranks} input, got {input.ndim}D input of shape "
                             f"{tuple(input.shape)}")
        cdim = 1 if input.ndim == max(self._ranks) or not self._unbatched_ok() else 0
        if input.shape[cdim] != self.num_features:
            raise ShapeError(f"{name}: expected input with {self.num_features} channels "
                             f"(num_features) at dim {cdim}, got input of shape {tuple(input.shape)}")

    def _unbatched_ok(self) -> bool:
        return False

    def _momentum(self):
        """The update factor of this call: momentum, or 1/num_batches_tracked when momentum is None
        (a cumulative moving average). Also counts the batch. Kept as tensor ops so it traces."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / _ops.cast(self.num_batches_tracked, self.running_mean.dtype)
        return factor

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    def forward(self, input):
        self._check_input(input)
        # (checked before the batch is counted, so a refused call changes no buffer)
        check_dtypes(type(self).__name__, input, weight=self.weight, bias=self.bias,
                     running_mean=self.running_mean, running_var=self.running_var)
        if self.training and input.numel() // self.num_features == 1:
            raise ValueError(f"{type(self).__name__}: expected more than 1 value per channel when "
                             f"training, got input of shape {tuple(input.shape)}")
        factor = self._momentum()
        # Batch statistics when training, or when there are no running statistics to use.
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                          self.weight, self.bias, use_batch, factor, self.eps)


BatchNorm1d = layer_class("BatchNorm1d", _BatchNorm, _ranks=(2, 3),
                          __doc__="Batch normalization of (N, C) or (N, C, L) input.")
BatchNorm2d = layer_class("BatchNorm2d", _BatchNorm, _ranks=(4,),
                          __doc__="Batch normalization of (N, C, H, W) input.")


class _InstanceNorm(_NormBase):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None, dtype=None, *,
                 bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def _unbatched_ok(self) -> bool:
        return True

    def _check_input(self, input) -> None:
        try:
            super()._check_input(input)
        except ShapeError:
            if self.affine or self.track_running_stats or input.ndim not in self._ranks:
                raise
            # Nothing here is sized by num_features: PyTorch runs such input, with a warning.
            import warnings
            cdim = 1 if input.ndim == max(self._ranks) else 0
            warnings.warn(f"{type(self).__name__}: input's size at dim={cdim} does not match "
                          f"num_features. You can silence this warning by not passing in "
                          f"num_features, which is not used because affine=False", UserWarning,
                          stacklevel=user_stacklevel())

    def forward(self, input):
        self._check_input(input)
        return self._normalize(input)

    def _normalize(self, input):
        if input.ndim == min(self._ranks):  # unbatched (C, ...)
            return _ops.squeeze(self._normalize(_ops.unsqueeze(input, 0)), 0)
        # PyTorch's instance norm neither counts batches nor averages cumulatively.
        factor = 0.0 if self.momentum is None else self.momentum
        use_input_stats = self.training or not self.track_running_stats
        return instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                             use_input_stats, factor, self.eps)


InstanceNorm1d = layer_class("InstanceNorm1d", _InstanceNorm, _ranks=(2, 3),
                             __doc__="Instance normalization of (N, C, L) or unbatched (C, L) input.")
InstanceNorm2d = layer_class("InstanceNorm2d", _InstanceNorm, _ranks=(3, 4),
                             __doc__="Instance normalization of (N, C, H, W) or unbatched (C, H, W) "
                                     "input.")


class GroupNorm(Module):
    """Normalizes each of ``num_groups`` groups of channels per sample; per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        _positive_int("num_groups", "GroupNorm", num_groups)
        _positive_int("num_channels", "GroupNorm", num_channels)
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _affine(self, (num_channels,), affine, bias, device, dtype)
        self.reset_parameters()

    reset_parameters = _reset_affine

    def forward(self, input):
        if input.ndim < 2 or input.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected input (N, {self.num_channels}, ...), got shape "
                             f"{tuple(input.shape)}")
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
