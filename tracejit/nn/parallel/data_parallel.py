"""`DataParallel`: PyTorch's single-process multi-GPU wrapper. tracejit runs a module on one
device per process, so the wrapper calls the module it holds unchanged; it keeps PyTorch's
``module`` attribute and ``module.``-prefixed state_dict keys, so programs and checkpoints
written for it load. (Several processes: `DistributedDataParallel`.)"""
from __future__ import annotations

from ..module import Module

__all__ = ["DataParallel"]


class DataParallel(Module):
    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        self.module = module
        self.device_ids = [] if device_ids is None else list(device_ids)
        self.output_device, self.dim = output_device, dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
