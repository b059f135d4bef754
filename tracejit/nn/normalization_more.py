"""BatchNorm3d, InstanceNorm3d, SyncBatchNorm, RMSNorm, LocalResponseNorm and CrossMapLRN2d.

SyncBatchNorm normalizes with the statistics of the local batch: with one process (the
only case without an initialized process group of several ranks) that is exactly what
PyTorch computes; with several ranks it raises, rather than silently differ from the
synchronized statistics PyTorch would use.
"""
from __future__ import annotations

from .. import ops as _ops
from ..ops.normalization_more import local_response_norm, rms_norm
from ..ops.pooling_nd import avg_pool3d
from ..ops.spatial import pad
from .layers import _factory, _Options, _reset_affine
from .module import Module, layer_class
from .normalization import _BatchNorm, _InstanceNorm
from .parameter import Parameter

__all__ = ["BatchNorm3d", "InstanceNorm3d", "SyncBatchNorm", "RMSNorm", "LocalResponseNorm",
           "CrossMapLRN2d"]


BatchNorm3d = layer_class("BatchNorm3d", _BatchNorm, _ranks=(5,),
                          __doc__="Batch normalization of (N, C, D, H, W) input.")
InstanceNorm3d = layer_class("InstanceNorm3d", _InstanceNorm, _ranks=(4, 5),
                             __doc__="Instance normalization of (N, C, D, H, W) or unbatched (C, D, H, W) "
                                     "input.")


class SyncBatchNorm(_BatchNorm):
    """Batch normalization of (N, C, *) input; local statistics (see the module docstring)."""
    _ranks = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, process_group=None,
                 device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def forward(self, input):
        if self.training:
            from .. import distributed as dist
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                raise NotImplementedError("SyncBatchNorm: synchronizing batch statistics across "
                                          "several ranks is not supported; use BatchNorm per rank")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """`module` with every BatchNorm layer replaced by a SyncBatchNorm holding its state."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = SyncBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                module.track_running_stats, process_group)
            out.load_state_dict(module.state_dict())
            out.train(module.training)
        for name, child in module.named_children():
            setattr(out, name, cls.convert_sync_batchnorm(child, process_group))
        return out


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_ops.empty(*shape, **_factory(device, dtype)))
        else:
            self.weight = None
        self.reset_parameters()

    reset_parameters = _reset_affine

    def forward(self, input):
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LocalResponseNorm(_Options):
    _args = ("size", "alpha", "beta", "k")
    _fn = staticmethod(local_response_norm)

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(LocalResponseNorm):
    """PyTorch's Lua-torch cross-channel LRN of (N, C, H, W) input. Unlike LocalResponseNorm
    its window is symmetric, channels c - h .. c + h with h = (size - 1) // 2 (also for an
    even size), and past channel h channel 0's square stays in (its running sum never
    drops it); the sum is scaled by alpha / size."""

    def forward(self, input):
        if input.ndim != 4:
            from ..errors import ShapeError
            raise ShapeError(f"CrossMapLRN2d: expected a 4-D input, got shape {tuple(input.shape)}")
        h, sq = (self.size - 1) // 2, input * input
        win = avg_pool3d(pad(sq.unsqueeze(1), (0, 0, 0, 0, h, h)), (2 * h + 1, 1, 1), stride=1)
        first = (_ops.arange(input.shape[1], device=input.device) > h).reshape(-1, 1, 1) * sq[:, :1]
        return input / ((win.squeeze(1) * (2 * h + 1) + first) * (self.alpha / self.size) + self.k) ** self.beta
