"""What a compiled forward saves for its backward: elementwise values it writes anyway.

Autodiff (jit/autodiff.py `split`) recomputes cheap elementwise intermediates in the
backward instead of saving them, because the backward's fused kernels usually recompute
them for free from values they read anyway. That is a loss when the forward writes the
value to memory regardless: an activation read by the next layer's matmul (the MLP's
``gelu(layer_norm(...))``, a ReLU before a Linear). The backward then recomputed it in a
pass of its own (read the LayerNorm output, write the activation again) only to feed the
weight gradient's GEMM, where saving it costs nothing but keeping the array alive until
the backward (as PyTorch's autograd does). Here such values are saved.

"Written anyway" is judged from the forward graph: a value read by an equation that runs
as a plan step (a matmul, a reshape, any non-fused primitive) must be in memory. Readers
that fuse do not count: elementwise ops, expand, the reductions fusion closes groups with,
and, with row fusion on, LayerNorm (compiler/rowfuse.py computes its input inside its
kernel).

The other way round, with row fusion on, a LayerNorm whose output only fused elementwise
work reads is recomputed by the backward instead of saved: its backward's row kernel
recomputes it from the row statistics it computes anyway (compiler/rowfuse.py), so the
forward need not write it. ``TRACEJIT_SAVE_WRITTEN=0`` restores plain recomputation.
"""
from __future__ import annotations

from .. import envflags

from ..jit.autodiff import _cheap
from ..jit.ir import Graph, Var
from . import backends, rowfuse
from .fusion import FUSIBLE_REDUCTIONS, _elementwise_ok
from ..ops.layer_norm_prim import LAYER_NORM

__all__ = ["recompute_unless_written"]


def recompute_unless_written(graph: Graph):
    """`split`'s ``cheap`` for `graph`: autodiff's rule, less the values the forward writes
    to memory anyway (see the module docstring)."""
    if envflags.is_off("TRACEJIT_SAVE_WRITTEN"):
        return _cheap
    # row fusion runs in CPU plans only (rowfuse.py); elsewhere LayerNorm stays a step
    row_fusion = rowfuse.enabled() and "row_kernels" in backends.for_graph(graph).capabilities
    written: set = set()
    for e in graph.eqns:
        p = e.prim
        if _elementwise_ok(e) or p in FUSIBLE_REDUCTIONS:   # fusion's own rule
            continue
        if row_fusion and p in rowfuse.ROW_PRIMS:
            continue
        written.update(a for a in e.inputs if isinstance(a, Var))

    results = {a for a in graph.outputs if isinstance(a, Var)}

    def cheap(e) -> bool:
        if row_fusion and e.prim is LAYER_NORM:
            # LayerNorm's output read only by fused elementwise work (the GELU after it)
            # is not written by its row kernel, and the backward's row kernel recomputes it
            # from the statistics it computes anyway (rowfuse `_recomputed_output`): saving
            # it would add a write and a read of the whole array
            return e.out not in written and e.out not in results
        return _cheap(e) and e.out not in written
    return cheap
