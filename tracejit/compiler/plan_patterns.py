"""The plan stage's patterns (jit/patterns.py), in the order they run: each rewrites a plan's
items (fusion groups and equations) into steps that only some backends' kernels run, so
each is guarded by the capability a backend declares (`backends.Backend.capabilities`),
and each has its switch in tracejit/envflags.py.

- ``gemm_epilogue``: a product and the bias / residual / ReLU group after it become one
  step whose epilogue the GEMM template or BLAS applies, a bias gradient's column sum a
  GEMV (gemm_steps.py);
- ``attention_pair``: self-attention's weights and context in one pass, its backward with
  the projection's bias gradient (attnpair.py).
"""
from __future__ import annotations

from ..jit.patterns import Pattern, register
from .attnpair import pair_attention
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
    ("attention_pair", pair_attention, "attention_pair", "TRACEJIT_ATTENTION_PAIR"),
))
