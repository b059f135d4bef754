"""More learning-rate schedules with PyTorch's formulas: LinearLR, ConstantLR,
MultiplicativeLR, PolynomialLR, CosineAnnealingWarmRestarts, CyclicLR, and the
combinators SequentialLR and ChainedScheduler."""
from __future__ import annotations

import math
import types
from bisect import bisect_right

from .lr_scheduler import LRScheduler, _lambdas_state, _load_lambdas_state, _lr_in_step, _per_group

__all__ = ["LinearLR", "ConstantLR", "MultiplicativeLR", "PolynomialLR", "CosineAnnealingWarmRestarts",
           "CyclicLR", "SequentialLR", "ChainedScheduler"]


class LinearLR(LRScheduler):
    """Scale the lr linearly from start_factor to end_factor over total_iters steps."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in lrs]
        if self._is_initial or self.last_epoch > self.total_iters:   # (a resume keeps the lrs)
            return lrs
        f = 1.0 + (self.end_factor - self.start_factor) / (
            self.total_iters * self.start_factor + (self.last_epoch - 1) * (self.end_factor - self.start_factor))
        return [lr * f for lr in lrs]

    def _get_closed_form_lr(self):
        f = self.start_factor + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) \
            / self.total_iters
        return [base * f for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """The lr times `factor` until total_iters steps, then the lr itself."""

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError("ConstantLR: factor must be in [0, 1]")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        if self.last_epoch == 0:
            return [lr * self.factor for lr in lrs]
        if self.last_epoch != self.total_iters:
            return lrs
        return [lr / self.factor for lr in lrs]

    def _get_closed_form_lr(self):
        f = self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor)
        return [base * f for base in self.base_lrs]


class MultiplicativeLR(LRScheduler):
    """Multiply the lr by lr_lambda(epoch) at every step after the first."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group("MultiplicativeLR", "lr_lambda", lr_lambda, optimizer)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        if not self._is_initial:   # (PyTorch's test: a restart at epoch 0 scales too)
            return [lr * f(self.last_epoch) for lr, f in zip(lrs, self.lr_lambdas)]
        return lrs

    state_dict = _lambdas_state
    load_state_dict = _load_lambdas_state


class PolynomialLR(LRScheduler):
    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        lrs = [g["lr"] for g in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:   # (a resume keeps the lrs)
            return lrs
        f = ((1.0 - self.last_epoch / self.total_iters) / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [lr * f for lr in lrs]

    def _get_closed_form_lr(self):
        f = (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
        return [base * f for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0, last_epoch: int = -1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected a positive integer T_0, got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                # (PyTorch's modulo: a resume from last_epoch=N starts with T_cur = N, which
                # can be more than one period past)
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        for g, lr in zip(self.optimizer.param_groups, _lr_in_step(self)):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class CyclicLR(LRScheduler):
    """Cycle the lr between base_lr and max_lr (triangular, triangular2, exp_range)."""

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000, step_size_down=None,
                 mode: str = "triangular", gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9, last_epoch: int = -1):
        base = _per_group("CyclicLR", "base_lr", base_lr, optimizer)
        if last_epoch == -1:
            for lr, g in zip(base, optimizer.param_groups):
                g["lr"] = lr
        self.max_lrs = _per_group("CyclicLR", "max_lr", max_lr, optimizer)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        if scale_fn is None:
            self._scale_fn = {"triangular": lambda x: 1.0, "triangular2": lambda x: 1 / (2.0 ** (x - 1)),
                              "exp_range": lambda x: gamma ** x}[mode]
            self.scale_mode = "iterations" if mode == "exp_range" else "cycle"
        else:
            self._scale_fn, self.scale_mode = scale_fn, scale_mode
        self._scale_fn_custom = scale_fn
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            key = "betas" if "betas" in optimizer.defaults else "momentum"
            if key == "momentum" and "momentum" not in optimizer.defaults:
                raise ValueError("CyclicLR: optimizer must support momentum or beta1 with cycle_momentum")
            self._mom_key = key
            self.base_momentums = _per_group("CyclicLR", "base_momentum", base_momentum, optimizer)
            self.max_momentums = _per_group("CyclicLR", "max_momentum", max_momentum, optimizer)
            if last_epoch == -1:
                for m, g in zip(self.max_momentums, optimizer.param_groups):
                    self._set_mom(g, m)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base

    def state_dict(self) -> dict:
        # PyTorch's key: a custom scale_fn object's attributes (None for a function)
        fn = self._scale_fn_custom
        return dict(super().state_dict(), _scale_fn_custom=None if fn is None or isinstance(
            fn, types.FunctionType) else dict(fn.__dict__))

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        attrs = state_dict.pop("_scale_fn_custom", None)
        super().load_state_dict(state_dict)
        if attrs is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(attrs)

    def _set_mom(self, g, m):
        if self._mom_key == "betas":
            g["betas"] = (m,) + tuple(g["betas"][1:])
        else:
            g["momentum"] = m

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        arg = cycle if self.scale_mode == "cycle" else self.last_epoch
        base = getattr(self, "base_lrs", [g["lr"] for g in self.optimizer.param_groups])
        lrs = [b + (m - b) * scale * self._scale_fn(arg) for b, m in zip(base, self.max_lrs)]
        if self.cycle_momentum:
            for g, bm, mm in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_mom(g, mm - (mm - bm) * scale * self._scale_fn(arg))
        return lrs


class _Combinator(LRScheduler):
    """A scheduler over `_schedulers`: its state_dict holds theirs as state dicts (PyTorch's
    layout), so a checkpoint of it is plain data ``torch.load``'s weights_only accepts."""

    def state_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        inner = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, inner):
            s.load_state_dict(sd)


class SequentialLR(_Combinator):
    """Run `schedulers` one after another, switching at `milestones`."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: expected {len(schedulers) - 1} milestones, got {len(milestones)}")
        _same_optimizer("SequentialLR", schedulers, optimizer)
        self.optimizer, self._schedulers, self._milestones = optimizer, list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in self._schedulers:     # undo the steps the schedulers took when made
            s.last_epoch -= 1
        self._schedulers[0]._initial_step()
        self._last_lr = self._schedulers[0].get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            # restart it at epoch 0 as PyTorch's _update_lr(0) does: its closed form where it
            # has one, else its rule applied to the current lrs (MultiplicativeLR scales the
            # previous scheduler's last lr)
            s.last_epoch = 0
            closed = getattr(s, "_get_closed_form_lr", None)
            lrs = closed() if closed is not None else _lr_in_step(s)
            for g, lr in zip(self.optimizer.param_groups, lrs):
                g["lr"] = lr
            s._last_lr = [g["lr"] for g in self.optimizer.param_groups]
        else:
            s.step()
        self._last_lr = s.get_last_lr()


class ChainedScheduler(_Combinator):
    """Step every scheduler in `schedulers` at each step."""

    def __init__(self, schedulers, optimizer=None):
        self._schedulers = list(schedulers)
        self.optimizer = optimizer if optimizer is not None else self._schedulers[0].optimizer
        _same_optimizer("ChainedScheduler", self._schedulers, self.optimizer)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def step(self) -> None:
        for s in self._schedulers:
            s.step()
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


def _same_optimizer(what: str, schedulers, optimizer) -> None:
    from .lr_scheduler import ReduceLROnPlateau
    for i, s in enumerate(schedulers):
        if isinstance(s, ReduceLROnPlateau):   # (its step needs the metric, which these do not pass)
            raise ValueError(f"{what} does not support `ReduceLROnPlateau` scheduler as it requires additional "
                             f"kwargs to be specified when calling `step`, but got one at index {i} in the given "
                             f"schedulers sequence.")
        if getattr(s, "optimizer", None) is not optimizer:
            raise ValueError(f"{what} expects all schedulers to belong to the same optimizer, but got "
                             f"scheduler {type(s).__name__} at index {i} with a different optimizer")


def _initial_step(self) -> None:
    """A scheduler's first step (as made at construction), for the combinators: in initial
    mode, as PyTorch's, so a recursive schedule (cosine) keeps the groups' lrs."""
    self._is_initial = True
    self._step_count = 0   # (its next step counts as the first, as after its constructor)
    try:
        LRScheduler.step(self)
    finally:
        self._is_initial = False


LRScheduler._initial_step = _initial_step
