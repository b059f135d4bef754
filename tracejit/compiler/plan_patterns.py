"""The plan stage's patterns (jit/patterns.py), in the order they run: each rewrites a plan's
items into steps only some backends run, guarded by `backends.Backend.capabilities`, with a
switch in tracejit/envflags.py: ``gemm_epilogue`` (gemm_steps.py).
"""
from __future__ import annotations

from ..jit.patterns import Pattern, register
from .gemm_steps import fold_epilogues

__all__ = ["PLAN_PATTERNS"]


def _needs(capability: str):
    def guard(backend) -> bool:
        return capability in backend.capabilities
    guard.__name__ = f"needs_{capability}"
    return guard


PLAN_PATTERNS = tuple(register(Pattern(name, rewrite, ("plan",), guard=_needs(capability), switch=switch))
                      for name, rewrite, capability, switch in (
    ("gemm_epilogue", fold_epilogues, "gemm_epilogue", "TRACEJIT_BIAS_GEMM"),
))
