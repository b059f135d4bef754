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
and a primitive that plans schedule as its rows form (compiler/rowinline.py: softmax,
LayerNorm over the last dim).

``TRACEJIT_SAVE_WRITTEN=0`` restores plain recomputation.

A static slice of a value the forward saves anyway (an LSTM cell's gates, column slices of
its product) is not saved itself: the backward takes the slice again, which its kernels
then read in place (compiler/slice_reads.py), where a saved slice arrives as a strided
input of the backward that its kernels copy first.
"""
from __future__ import annotations

from .. import envflags

from ..jit.autodiff import _cheap
from ..jit.ir import Graph, Var
from .rowinline import inlined
from .fusion import FUSIBLE_REDUCTIONS, _elementwise_ok
from .slice_reads import static_slice

__all__ = ["recompute_unless_written"]


def recompute_unless_written(graph: Graph):
    """`split`'s ``cheap`` for `graph`: autodiff's rule, less the values the forward writes
    to memory anyway (see the module docstring)."""
    if envflags.is_off("TRACEJIT_SAVE_WRITTEN"):
        return _cheap
    written: set = set()
    for e in graph.eqns:
        p = e.prim
        if _elementwise_ok(e) or p in FUSIBLE_REDUCTIONS:   # fusion's own rule
            continue
        if inlined(e):
            continue
        written.update(a for a in e.inputs if isinstance(a, Var))

    made = {o: e for e in graph.eqns for o in e.outs}

    def cheap(e) -> bool:
        if static_slice(e):
            # a view of a value saved anyway: taken again by the backward
            src = made.get(e.inputs[0])
            return src is None or not cheap(src)
        return _cheap(e) and e.out not in written
    return cheap
