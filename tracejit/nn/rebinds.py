"""Which modules' tensor attributes compiled calls set anew, for the compiled guards.

A compiled call that sets a module's attribute to its new tensor (``self.h = f(self.h)``)
moves only `rebind_epoch`, not `nn.module.state_epoch`: `rebound` maps each such module's
id to `rebind_epoch` at its last rebind, so the guards of module trees that hold none of
them stay valid without walking their tree (jit/module_guard.py).
"""
from __future__ import annotations

from typing import Iterable

from . import module as _module

__all__ = ["rebind_epoch", "rebound", "note_rebinds"]

rebind_epoch = [0]
rebound: dict = {}


def note_rebinds(objs: Iterable) -> None:
    """Record that a compiled call rebound tensor attributes of `objs`; an object that is
    no module moves `state_epoch`, as a setattr would."""
    rebind_epoch[0] += 1
    for o in objs:
        if isinstance(o, _module.Module):
            rebound[id(o)] = rebind_epoch[0]
        else:
            _module.state_epoch[0] += 1
