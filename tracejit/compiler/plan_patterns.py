"""The plan stage's patterns (jit/patterns.py), in the order they run: each rewrites a plan's
items (fusion groups and equations) into steps that only some backends' kernels run, so
each is guarded by the capability a backend declares (`backends.Backend.capabilities`),
and each has its switch in tracejit/envflags.py.

- ``row_fusion``: LayerNorm's and softmax's row kernels take the elementwise groups
  around them (rowfuse.py);
- ``bias_gemm``: a bias add left alone after its matmul goes into the GEMM, a bias
  gradient's column sum into a GEMV (biasgemm.py);
- ``attention_pair``: self-attention's weights and context in one pass, its backward with
  the projection's bias gradient (attnpair.py);
- ``gemm_pair``: two independent products (a layer's input and weight gradients) at once
  (gemmpair.py).
"""
from __future__ import annotations

from ..jit.patterns import Pattern, register
from .attnpair import pair_attention
from .biasgemm import fold_bias
from .gemmpair import pair_gemms
from .rowfuse import fuse_rows

__all__ = ["PLAN_PATTERNS"]


def _needs(capability: str):
    def guard(backend) -> bool:
        return capability in backend.capabilities
    guard.__name__ = f"needs_{capability}"
    return guard


PLAN_PATTERNS = tuple(register(Pattern(name, rewrite, ("plan",), guard=_needs(capability), switch=switch))
                      for name, rewrite, capability, switch in (
    ("row_fusion", fuse_rows, "row_kernels", "TRACEJIT_ROW_FUSION"),
    ("bias_gemm", fold_bias, "gemm_epilogue", "TRACEJIT_BIAS_GEMM"),
    ("attention_pair", pair_attention, "attention_pair", "TRACEJIT_ATTENTION_PAIR"),
    ("gemm_pair", pair_gemms, "gemm_pair", "TRACEJIT_GEMM_PAIRS"),
))
