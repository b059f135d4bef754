"""Reading tracejit's on/off environment variables, one spelling for all of them.

A variable counts as *off* when set to one of ``FALSE`` (case and surrounding spaces
ignored): ``TRACEJIT_CACHE=0``, ``TRACEJIT_LOSS_GRADS=off``, ``TRACEJIT_MALLOC_TUNING=no``.
Imports nothing of tracejit, so any module (even one run at ``import tracejit``) can use it.
"""
from __future__ import annotations

import os

__all__ = ["FALSE", "is_off"]

FALSE = ("", "0", "false", "no", "off")


def is_off(name: str) -> bool:
    """True when the default-on switch `name` is set to a false value (unset: on)."""
    value = os.environ.get(name)
    return value is not None and value.strip().lower() in FALSE
