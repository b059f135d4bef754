"""The registry of rewrite patterns: every graph or plan rewrite, with the guard that says
where it applies, in one ordered list per stage.

A `Pattern` is a rewrite, the stages it runs in, the primitives whose equations it looks
at (equation stages), a guard on the backend's capabilities (plan stages: a rewrite into
kernels only one backend has) and a switch of the table in tracejit/envflags.py that turns
it off. Stages, and what a rewrite takes and returns there:

- ``"simplify"`` (jit/passes.py `simplify`) and ``"joint_backward"`` (jit/autodiff.py
  `split`, on a joint graph's backward half): an equation of one of `prims`,
  ``rewrite(eqn, producer, uses) -> [Eqn] | None`` (None: left as it is);
- ``"forward"``, ``"backward"`` (compiler/executor.py, a compiled training step's graphs
  after differentiation): ``rewrite(graph) -> graph``;
- ``"plan"`` (compiler/plan.py, before the plan's source is generated): the plan's items
  (fusion groups and equations), ``rewrite(items, graph) -> items``.

Patterns run in the order they were registered: each module registers its own at its
end (jit/passes.py, jit/scatter_products.py, jit/batchnorm_split.py,
compiler/scatters.py, compiler/plan_patterns.py).
Equations are matched by their primitive record, never by its name. Learned from
Inductor's ``register_graph_pattern(..., extra_check=...)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from .. import envflags

__all__ = ["Pattern", "register", "patterns", "equation_rewrites", "apply", "STAGES"]

STAGES = ("simplify", "joint_backward", "forward", "backward", "plan")


@dataclass(frozen=True)
class Pattern:
    name: str
    rewrite: Callable
    stages: tuple
    prims: tuple = ()                    # equation stages: the primitives it rewrites
    guard: Optional[Callable] = None     # guard(backend) -> bool; None: every backend
    switch: str = ""                     # envflags switch that turns it off

    def applies(self, backend=None) -> bool:
        if self.switch and envflags.is_off(self.switch):
            return False
        return self.guard is None or (backend is not None and self.guard(backend))


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


def patterns(stage: str, backend=None) -> list:
    """The patterns of `stage` that apply now (switch on, guard passing), in order."""
    return [p for p in _PATTERNS if stage in p.stages and p.applies(backend)]


def equation_rewrites(stage: str, prim) -> tuple:
    """The rewrites of `stage` that look at equations of `prim`, in order (switches and
    guards are asked per equation: `Pattern.applies`)."""
    key = (stage, prim)
    found = _BY_PRIM.get(key)
    if found is None:
        found = _BY_PRIM[key] = tuple(p for p in _PATTERNS if stage in p.stages and prim in p.prims)
    return found


def apply(stage: str, value, *args, backend=None):
    """`value` (a graph, or a plan's items) through every pattern of `stage` that applies."""
    for p in patterns(stage, backend):
        value = p.rewrite(value, *args)
    return value
