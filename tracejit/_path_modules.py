"""Modules that only hold names under a PyTorch submodule path (``torch.nn.modules.loss``,
``torch.distributions.normal``): made at import from a table of names, registered in
``sys.modules`` so ``from ... import`` finds them, rather than kept as files of re-exports.
"""
from __future__ import annotations

import sys
import types
from importlib.machinery import ModuleSpec


def path_module(name: str, doc: str, attrs: dict) -> types.ModuleType:
    """A module `name` holding `attrs` (its ``__all__``), registered in ``sys.modules``."""
    m = types.ModuleType(name, doc)
    m.__spec__, m.__all__ = ModuleSpec(name, None), list(attrs)
    for attr, value in attrs.items():
        setattr(m, attr, value)
    sys.modules[name] = m
    return m
