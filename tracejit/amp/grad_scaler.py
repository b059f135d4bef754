"""`GradScaler`: loss scaling for mixed-precision training, with PyTorch's interface.

``scale(loss)`` multiplies by the current scale; ``unscale_(optimizer)`` divides that
optimizer's gradients by it once per step and notes whether any is inf/nan; ``step``
calls ``optimizer.step()`` only when they were finite; ``update`` grows the scale after
``growth_interval`` clean steps and backs it off after an overflow.
"""
from __future__ import annotations

import math
import warnings

from ..errors import user_stacklevel

__all__ = ["GradScaler"]


class GradScaler:
    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if device == "cuda" and enabled:
            from .. import cuda
            if not cuda.is_available():
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                              "Disabling.", UserWarning, stacklevel=user_stacklevel())
                enabled = False
        if growth_factor <= 1.0:
            raise ValueError(f"GradScaler: growth_factor should be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor should be in (0, 1), got {backoff_factor}")
        self._device, self._enabled = device, bool(enabled)
        self._scale, self._growth_factor, self._backoff_factor = float(init_scale), growth_factor, backoff_factor
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._unscaled: dict = {}      # id(optimizer) -> found inf/nan

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def unscale_(self, optimizer) -> None:
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        from ..autograd.grad_mode import no_grad
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    if not found and not bool(p.grad.isfinite().all()):
                        found = True
        self._unscaled[id(optimizer)] = found

    def step(self, optimizer, *args, **kwargs):
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        if self._unscaled[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif any(self._unscaled.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        if not math.isfinite(self._scale):
            raise RuntimeError(f"GradScaler: the scale became {self._scale}")
        self._unscaled = {}

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        if not state:
            raise RuntimeError("GradScaler: the state_dict is empty (saved from a disabled scaler)")
        self._scale = float(state["scale"])
        self._growth_factor = state["growth_factor"]
        self._backoff_factor = state["backoff_factor"]
        self._growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]
