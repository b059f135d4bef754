"""Run a PyTorch program on tracejit by changing only the import.

``install()`` makes ``import torch`` (and ``import torch.nn as nn``, ``from torch.optim
import Adam``, ...) give tracejit's modules, in this process, as a user's
``import tracejit as torch`` does: the programs under bench/programs are written against
``torch`` and run unchanged by either framework. It must run before anything imports
the real torch; the runner calls it in tracejit's worker processes only.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# The submodules PyTorch programs import by path; anything else under ``torch.`` is
# looked up under ``tracejit.`` when first imported (`_Finder`).
_COMMON = ("nn", "nn.functional", "nn.init", "nn.utils", "nn.utils.rnn", "optim",
           "optim.lr_scheduler", "distributions", "utils", "utils.data", "autograd",
           "linalg", "fft", "special")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``import torch.x.y`` with ``tracejit.x.y``."""

    def __init__(self):
        self._specs: dict = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        real = "tracejit" + fullname[len("torch"):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module("tracejit" + spec.name[len("torch"):])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # tracejit's own module, already executed: the import machinery set its __spec__
        # to the alias's between create_module and here; give it its own back
        for alias, spec in list(self._specs.items()):
            if spec.name == module.__name__:
                module.__spec__ = spec
                del self._specs[alias]


def install() -> None:
    """Make ``torch`` and its common submodules name tracejit's, in this process."""
    if "torch" in sys.modules and not _is_alias(sys.modules["torch"]):
        raise RuntimeError("torchswap.install: the real torch is already imported in this process")
    import tracejit
    sys.modules["torch"] = tracejit
    for name in _COMMON:
        sys.modules["torch." + name] = importlib.import_module("tracejit." + name)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def _is_alias(module) -> bool:
    return getattr(module, "__name__", "") == "tracejit"
