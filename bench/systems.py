"""The systems compared, and which of them this machine has.

A system is a framework plus a mode (eager or compiled). Availability is decided in the
parent process without importing the framework (``importlib.util.find_spec``), so the
parent stays light; anything finer (tracejit's JIT not written yet, ``tj.nn`` missing)
is found out inside the system's own process and reported as a per-workload note.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class System:
    name: str            # used in --systems and in the JSON
    label: str           # column header
    module: str          # the framework module it needs
    impl: str            # bench.impls.<impl> holds its code
    compiled: bool
    optional: bool       # a peer that may be absent (skipped with a note)


SYSTEMS: tuple[System, ...] = (
    System("numpy", "numpy eager", "numpy", "numpy_impl", False, False),
    System("tracejit_eager", "tracejit eager", "tracejit", "tracejit_impl", False, False),
    System("tracejit_compiled", "tracejit compiled", "tracejit", "tracejit_impl", True, False),
    System("torch_eager", "torch eager", "torch", "torch_impl", False, True),
    System("torch_compile", "torch.compile", "torch", "torch_impl", True, True),
    System("jax_jit", "jax.jit", "jax", "jax_impl", True, True),
)

SYSTEM_NAMES = tuple(s.name for s in SYSTEMS)


def by_name(name: str) -> System:
    for s in SYSTEMS:
        if s.name == name:
            return s
    raise KeyError(f"unknown system {name!r}; known: {', '.join(SYSTEM_NAMES)}")


def availability(system: System) -> str | None:
    """None when the system can run here, else a note saying why not."""
    if importlib.util.find_spec(system.module) is None:
        hint = {"torch": "pip install torch==2.13.0", "jax": "pip install jax jaxlib"}.get(
            system.module, f"pip install {system.module}")
        return f"{system.module} not installed ({hint})"
    return None


def load(system: System):
    """The object that runs workloads for ``system`` (imports the framework)."""
    module = importlib.import_module(f"bench.impls.{system.impl}")
    return module.make(system)
