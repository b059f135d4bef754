"""The registry of rewrite patterns: every graph rewrite, with the switch that turns it
off, in one ordered list per stage.

A `Pattern` is a rewrite, the stages it runs in, the primitives whose equations it looks
at (equation stages) and a switch of the table in tracejit/envflags.py that turns it off.
Stages, and what a rewrite takes and returns there:

- ``"simplify"`` (jit/passes.py `simplify`) and ``"joint_backward"`` (jit/autodiff.py
  `split`, on a joint graph's backward half): an equation of one of `prims`,
  ``rewrite(eqn, producer, uses) -> [Eqn] | None`` (None: left as it is);
- ``"forward"``, ``"backward"`` (compiler/executor.py, a compiled training step's graphs
  after differentiation): ``rewrite(graph) -> graph``.

Patterns run in the order they were registered: each module registers its own at its
end (jit/passes.py, jit/scatter_products.py, jit/batchnorm_split.py).
Equations are matched by their primitive record, never by its name. Learned from
Inductor's ``register_graph_pattern(..., extra_check=...)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .. import envflags

__all__ = ["Pattern", "register", "patterns", "equation_rewrites", "apply", "STAGES"]

STAGES = ("simplify", "joint_backward", "forward", "backward")


@dataclass(frozen=True)
class Pattern:
    name: str
    rewrite: Callable
    stages: tuple
    prims: tuple = ()                    # equation stages: the primitives it rewrites
    switch: str = ""                     # envflags switch that turns it off

    def applies(self) -> bool:
        return not (self.switch and envflags.is_off(self.switch))


_PATTERNS: list = []
_BY_PRIM: dict = {}     # (stage, primitive) -> patterns, memoized


def register(pattern: Pattern) -> Pattern:
    """Add `pattern` after every pattern registered before it (one name, once)."""
    unknown = [s for s in pattern.stages if s not in STAGES]
    if unknown:
        raise ValueError(f"pattern {pattern.name!r}: unknown stage(s) {unknown} (known: {', '.join(STAGES)})")
    if any(known.name == pattern.name for known in _PATTERNS):
        raise ValueError(f"pattern {pattern.name!r} registered twice")
    if pattern.switch and pattern.switch not in envflags.SWITCHES:
        raise KeyError(f"pattern {pattern.name!r}: {pattern.switch} is not a switch (envflags.SWITCHES)")
    _PATTERNS.append(pattern)
    _BY_PRIM.clear()
    return pattern


def patterns(stage: str) -> list:
    """The patterns of `stage` that apply now (switch on), in order."""
    return [p for p in _PATTERNS if stage in p.stages and p.applies()]


def equation_rewrites(stage: str, prim) -> tuple:
    """The rewrites of `stage` that look at equations of `prim`, in order (switches are
    asked per equation: `Pattern.applies`)."""
    key = (stage, prim)
    found = _BY_PRIM.get(key)
    if found is None:
        found = _BY_PRIM[key] = tuple(p for p in _PATTERNS if stage in p.stages and prim in p.prims)
    return found


def apply(stage: str, value, *args):
    """`value` (a graph) through every pattern of `stage` that applies."""
    for p in patterns(stage):
        value = p.rewrite(value, *args)
    return value
