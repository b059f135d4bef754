"""``torch.optim.swa_utils``: weight averaging (SWA and EMA) with ``AveragedModel``, the
``SWALR`` schedule, and ``update_bn`` to recompute BatchNorm statistics for the averaged
weights, with PyTorch's formulas (the running average as ``lerp`` by ``1 / (n + 1)``, EMA
as ``lerp`` by ``1 - decay``)."""
from __future__ import annotations

import copy
import math
from typing import Callable

from ..autograd.grad_mode import no_grad
from ..nn.module import Module
from .lr_scheduler import LRScheduler, _per_group

__all__ = ["AveragedModel", "SWALR", "update_bn", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn",
           "get_ema_avg_fn", "get_swa_avg_fn"]


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable:
    def ema_update(ema_params: list, current_params: list, num_averaged) -> None:
        for e, c in zip(ema_params, current_params):
            if e.dtype.is_floating_point or e.dtype.is_complex:
                e.lerp_(c, 1 - decay)
            else:   # (an integer buffer, num_batches_tracked: truncated, as PyTorch's)
                e.copy_(e * decay + c * (1 - decay))
    return ema_update


def get_swa_multi_avg_fn() -> Callable:
    def swa_update(averaged_params: list, current_params: list, num_averaged) -> None:
        n = float(num_averaged.item() if hasattr(num_averaged, "item") else num_averaged)
        for a, c in zip(averaged_params, current_params):
            if a.dtype.is_floating_point:
                a.lerp_(c, 1 / (n + 1))
            else:
                a.copy_(a + (c - a) / (n + 1))
    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable:
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param
    return ema_update


def get_swa_avg_fn() -> Callable:
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)
    return swa_update


class AveragedModel(Module):
    """A copy of `model` whose parameters (and buffers, with ``use_buffers``) are the
    running average (``avg_fn``/``multi_avg_fn``; SWA's equal weights by default) of the
    model's at each ``update_parameters(model)``."""

    def __init__(self, model: Module, device=None, avg_fn: Callable | None = None,
                 multi_avg_fn: Callable | None = None, use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise ValueError("AveragedModel: only one of avg_fn and multi_avg_fn should be provided")
        from .. import ops
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        from .. import dtypes
        self.register_buffer("n_averaged", ops.tensor(0, dtype=dtypes.int64))
        self.avg_fn, self.multi_avg_fn, self.use_buffers = avg_fn, multi_avg_fn, use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _tensors(self, model: Module) -> list:
        return list(model.parameters()) + (list(model.buffers()) if self.use_buffers else [])

    def update_parameters(self, model: Module) -> None:
        mine = self._tensors(self.module)
        theirs = self._tensors(model.module if isinstance(model, AveragedModel) else model)
        n = int(self.n_averaged.item())
        with no_grad():
            mine_d = [p.detach() for p in mine]
            theirs_d = [p.detach().to(a.device) for p, a in zip(theirs, mine_d)]
            if n == 0:
                for a, c in zip(mine_d, theirs_d):
                    a.copy_(c)
            elif self.avg_fn is not None:
                for a, c in zip(mine_d, theirs_d):
                    a.copy_(self.avg_fn(a, c, self.n_averaged.to(a.device)))
            else:   # one call per device and dtype, as PyTorch groups them
                groups: dict = {}
                for a, c in zip(mine_d, theirs_d):
                    mine_g, theirs_g = groups.setdefault((a.device, a.dtype), ([], []))
                    mine_g.append(a)
                    theirs_g.append(c)
                avg = self.multi_avg_fn or get_swa_multi_avg_fn()
                for (dev, _), (mine_g, theirs_g) in groups.items():
                    avg(mine_g, theirs_g, self.n_averaged.to(dev))
            if not self.use_buffers:   # buffers follow the model's (update_bn recomputes BN's)
                src = model.module if isinstance(model, AveragedModel) else model
                for b, c in zip(self.module.buffers(), src.buffers()):
                    b.detach().copy_(c.detach().to(b.device))
            self.n_averaged += 1


def update_bn(loader, model: Module, device=None) -> None:
    """Recompute every BatchNorm's running statistics as the plain average over one pass of
    `loader` (each batch, or its first element, fed to `model` in training mode)."""
    from ..nn.normalization import _BatchNorm
    momenta = {}
    for m in model.modules():
        if isinstance(m, _BatchNorm):
            m.reset_running_stats()
            momenta[m] = m.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for m in momenta:
        m.momentum = None
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for m, momentum in momenta.items():
        m.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's lr to ``swa_lr`` over ``anneal_epochs`` (cosine or linear), then
    hold it, as PyTorch's SWALR."""

    def __init__(self, optimizer, swa_lr, anneal_epochs: int = 10, anneal_strategy: str = "cos",
                 last_epoch: int = -1) -> None:
        lrs = _per_group("SWALR", "swa_lr", swa_lr, optimizer)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"SWALR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        if isinstance(anneal_epochs, bool) or not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"SWALR: anneal_epochs must be a non-negative int, got {anneal_epochs!r}")
        for lr, group in zip(lrs, optimizer.param_groups):
            group["swa_lr"] = lr
        self.anneal_epochs = anneal_epochs
        self.anneal_strategy = anneal_strategy
        super().__init__(optimizer, last_epoch)

    def _anneal(self, t: float) -> float:
        return t if self.anneal_strategy == "linear" else (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _initial_lr(lr: float, swa_lr: float, alpha: float) -> float:
        return swa_lr if alpha == 1 else (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        step = self.last_epoch
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self._anneal(max(0.0, min(1.0, (step - 1) / max(1, self.anneal_epochs))))
        prev = [self._initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in self.optimizer.param_groups]
        alpha = self._anneal(max(0.0, min(1.0, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(self.optimizer.param_groups, prev)]
