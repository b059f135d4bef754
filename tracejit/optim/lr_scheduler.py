"""Learning-rate schedules: call ``scheduler.step()`` once per epoch after ``optimizer.step()``."""
from __future__ import annotations

import functools
import math
import types
import warnings
from bisect import bisect_right
from collections import Counter
from typing import Callable

from .optimizer import Optimizer

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "LambdaLR", "CosineAnnealingLR"]


def _per_group(who: str, name: str, value, optimizer: Optimizer) -> list:
    """`value` for each param group: a list or tuple of one per group, or one for all."""
    n = len(optimizer.param_groups)
    if not isinstance(value, (list, tuple)):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"{who}: expected {n} values for {name}, got {len(value)}")
    return list(value)


_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and later, you "
    "should call them in the opposite order: `optimizer.step()` before `lr_scheduler.step()`.  Failure to "
    "do this will result in PyTorch skipping the first value of the learning rate schedule. See more "
    "details at https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate")


def _warning_get_lr(get_lr):
    """A built-in schedule's `get_lr`, warning when called outside a step as PyTorch's do
    (the next lr it computes is not the current one)."""
    @functools.wraps(get_lr)
    def run(self):
        if not self.__dict__.get("_get_lr_called_within_step"):
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=2)
        return get_lr(self)
    return run


def _lr_in_step(scheduler) -> list:
    """`scheduler.get_lr()` as its step calls it (no warning)."""
    scheduler._get_lr_called_within_step = True
    try:
        return scheduler.get_lr()
    finally:
        scheduler._get_lr_called_within_step = False


class LRScheduler:
    """Base class: sets each group's ``lr`` from ``get_lr()`` on every ``step()``."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # (a user's schedule does not warn in PyTorch: its get_lr does not ask)
        if cls.__module__.startswith(__package__ + ".") and "get_lr" in cls.__dict__:
            cls.get_lr = _warning_get_lr(cls.__dict__["get_lr"])

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: expected an Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when "
                                   f"resuming an optimizer (last_epoch={last_epoch})")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._is_initial = True   # (the constructor's step keeps the groups' lrs, as PyTorch's)
        self._step_count = 0
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch. ``step(epoch)`` (deprecated in PyTorch, still accepted there)
        jumps to `epoch`, using the schedule's closed form where it has one."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            # the first step after the constructor's, with no optimizer step yet: the schedule
            # then skips its first value
            warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            lrs = _lr_in_step(self)
        else:
            warnings.warn("the epoch argument of scheduler.step() is deprecated: call scheduler.step() "
                          "once per epoch; with an epoch the closed form is used where available",
                          UserWarning, stacklevel=2)
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            lrs = closed() if closed is not None else _lr_in_step(self)
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply the lr by `gamma` every `step_size` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        # a float is accepted as PyTorch accepts it (its text-classification tutorial passes 1.0)
        if isinstance(step_size, bool) or not isinstance(step_size, (int, float)) or not step_size > 0:
            raise ValueError(f"StepLR: step_size must be a positive number, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by `gamma` at each epoch listed in `milestones`."""

    def __init__(self, optimizer: Optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(int(m) for m in milestones)   # (PyTorch's state_dict holds this)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        # Scales the current lrs, as PyTorch's chainable form: a chained schedule, a
        # reloaded state or a hand-set lr carries on from the lr it finds.
        k = self.milestones[self.last_epoch]
        return [g["lr"] * self.gamma ** k if k else g["lr"] for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        k = bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [base * self.gamma ** k for base in self.base_lrs]

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        # (a sorted list where an older tracejit saved it: indexed by epoch it would be wrong)
        m = self.milestones
        self.milestones = Counter(m.elements() if isinstance(m, Counter) else m)


class ExponentialLR(LRScheduler):
    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        # (the constructor's step keeps the lrs, also when resuming at a later last_epoch)
        if self._is_initial:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


def _lambdas_state(self) -> dict:
    """PyTorch's state of a schedule of lr_lambdas: plain functions are stored as None,
    callable objects by their ``__dict__``."""
    state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
    state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                           for fn in self.lr_lambdas]
    return state


def _load_lambdas_state(self, state_dict: dict) -> None:
    state_dict = dict(state_dict)
    lambdas = state_dict.pop("lr_lambdas", None) or []
    self.__dict__.update(state_dict)
    for fn, attrs in zip(self.lr_lambdas, lambdas):
        if attrs is not None:
            fn.__dict__.update(attrs)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch); one function, or one per param group."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable | list, last_epoch: int = -1):
        self.lr_lambdas = _per_group("LambdaLR", "lr_lambda", lr_lambda, optimizer)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for base, fn in zip(self.base_lrs, self.lr_lambdas)]

    state_dict = _lambdas_state
    load_state_dict = _load_lambdas_state


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        # PyTorch's recursive (chainable) form: each step rescales the current lr.
        groups, e, t, lo = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return [g["lr"] for g in groups]
        if (e - 1 - t) % (2 * t) == 0:
            return [g["lr"] + (base - lo) * (1 - math.cos(math.pi / t)) / 2
                    for base, g in zip(self.base_lrs, groups)]
        ratio = (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
        return [ratio * (g["lr"] - lo) + lo for g in groups]

    def _get_closed_form_lr(self) -> list[float]:
        c = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


_LRScheduler = LRScheduler   # PyTorch's older name, kept there as an alias


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr rises from max_lr/div_factor to max_lr over ``pct_start`` of the
    steps, then anneals to initial_lr/final_div_factor (three_phase: back to the initial lr
    first); momentum (or Adam's beta1) cycles inversely. Call ``step()`` after every batch."""

    def __init__(self, optimizer: Optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True, base_momentum=0.85,
                 max_momentum=0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: you must define either total_steps OR (epochs AND "
                                 "steps_per_epoch)")
            for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, int) or v <= 0:
                    raise ValueError(f"OneCycleLR: expected a positive integer {name}, got {v!r}")
            total_steps = epochs * steps_per_epoch
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"OneCycleLR: expected a positive integer total_steps, got {total_steps!r}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: expected a float between 0 and 1 for pct_start, got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.total_steps = total_steps
        self.anneal_strategy = anneal_strategy
        self.cycle_momentum = cycle_momentum
        up = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                             "base_momentum", "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        groups = optimizer.param_groups
        max_lrs = _per_group("OneCycleLR", "max_lr", max_lr, optimizer)
        if last_epoch == -1:
            for g, m in zip(groups, max_lrs):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("OneCycleLR: optimizer must support momentum or betas with "
                                 "cycle_momentum enabled")
            self._use_beta1 = "betas" in optimizer.defaults
            bases = _per_group("OneCycleLR", "base_momentum", base_momentum, optimizer)
            maxes = _per_group("OneCycleLR", "max_momentum", max_momentum, optimizer)
            if last_epoch == -1:
                for g, lo, hi in zip(groups, bases, maxes):
                    self._set_momentum(g, hi)
                    g["max_momentum"], g["base_momentum"] = hi, lo
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict, m: float) -> None:
        if self._use_beta1:
            group["betas"] = (m, *group["betas"][1:])
        else:
            group["momentum"] = m

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step} times; the specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(g[lr0], g[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(g, self._anneal(g[m0], g[m1], pct))
                    break
                start = end
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` once a metric has not improved for ``patience`` epochs.

    ``step(metric)`` once per epoch. Improvement is relative (``threshold_mode='rel'``:
    better than best * (1 -/+ threshold)) or absolute; after a reduction, ``cooldown``
    epochs pass before bad epochs count again; lrs never go below ``min_lr``, and changes
    smaller than ``eps`` are skipped. An `LRScheduler`, as PyTorch's (isinstance checks), but
    stepped by metric: it takes no constructor step.
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0.0, eps: float = 1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"ReduceLROnPlateau: expected an Optimizer, got {type(optimizer).__name__}")
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode {mode!r} is unknown; use 'min' or 'max'")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold mode {threshold_mode!r} is unknown; use 'rel' "
                             f"or 'abs'")
        self.min_lrs = _per_group("ReduceLROnPlateau", "min_lr", min_lr, optimizer)
        # a scalar min_lr also covers groups added later (add_param_group)
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = 0
        self.cooldown_counter = 0
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (1.0 + self.threshold) if self.threshold_mode == "rel" else best + self.threshold)

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def step(self, metrics, epoch: int | None = None) -> None:
        """One epoch's `metrics`; `epoch` (deprecated in PyTorch, still accepted there) sets
        `last_epoch`."""
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        if epoch is None:
            self.last_epoch += 1
        else:
            warnings.warn("the epoch argument of scheduler.step() is deprecated: call scheduler.step(metrics) "
                          "once per epoch", UserWarning, stacklevel=2)
            self.last_epoch = epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0   # bad epochs during cooldown do not count
        if self.num_bad_epochs > self.patience:
            if len(self.min_lrs) != len(self.optimizer.param_groups):
                if self.default_min_lr is None:
                    raise RuntimeError(f"ReduceLROnPlateau: the optimizer has {len(self.optimizer.param_groups)} "
                                       f"param groups but min_lr lists {len(self.min_lrs)} (a group was added); "
                                       f"set min_lrs to one per group")
                self.min_lrs = [self.default_min_lr] * len(self.optimizer.param_groups)
            for g, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(g["lr"])
                new = max(old * self.factor, min_lr)
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)


from .lr_scheduler_more import *  # noqa: E402,F401,F403
from .lr_scheduler_more import __all__ as _more  # noqa: E402
__all__ += _more + ["OneCycleLR", "ReduceLROnPlateau"]
