"""Reading tracejit's on/off environment variables, one spelling for all of them.

A variable counts as *off* when set to one of ``FALSE`` (case and surrounding spaces
ignored): ``TRACEJIT_CACHE=0``, ``TRACEJIT_LOSS_GRADS=off``, ``TRACEJIT_MALLOC_TUNING=no``.
Imports nothing of tracejit, so any module (even one run at ``import tracejit``) can use it.
`ProcessTuning` is the shape of the process-wide settings made at ``import tracejit``
(`memory`, `threads`), each with a switch to turn it off.
"""
from __future__ import annotations

import os
from typing import Callable

__all__ = ["FALSE", "is_off", "ProcessTuning"]

FALSE = ("", "0", "false", "no", "off")


def is_off(name: str) -> bool:
    """True when the default-on switch `name` is set to a false value (unset: on)."""
    value = os.environ.get(name)
    return value is not None and value.strip().lower() in FALSE


class ProcessTuning:
    """A process-wide setting applied once: calling it runs `apply` (which returns whether
    the setting took effect) unless the switch `flag` is off or it already took effect;
    the call returns `applied`."""

    def __init__(self, flag: str, apply: Callable[[], bool], doc: str = ""):
        self.flag = flag
        self.applied = False
        self._apply = apply
        self.__doc__ = doc

    def __call__(self) -> bool:
        if not self.applied and not is_off(self.flag):
            self.applied = bool(self._apply())
        return self.applied
