"""``tracejit.optim``: optimizers (SGD, Adam, AdamW) and learning-rate schedules, like ``torch.optim``."""
from __future__ import annotations

from . import lr_scheduler  # noqa: F401
from .adam import FUSED_MIN, Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "FUSED_MIN", "lr_scheduler"]
