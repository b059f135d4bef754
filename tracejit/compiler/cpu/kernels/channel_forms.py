"""The CPU kernels of BatchNorm's one-pass records, rendered by the channel-group renderer.

``batch_norm_forward`` / ``batch_norm_backward`` give *channel forms* (per-channel sums,
then elementwise work reading them): traced over (N, C, H, W) operands they are one channel
group, lowered and rendered by the CPU backend as a compiled step's BatchNorm is, so eager
and compiled run one lowering. Per channel the kernel folds the sums, then writes the
outputs while the input's run is still in cache.

Outputs: forward's normalized value (C-contiguous), mean and variance; backward's input
gradient channel-major (the convolution backward's GEMM rows), then (sum g, sum g*xhat).
An operand of x's shape goes in as its (C, N, H, W) view where channel-major, else
C-contiguous; other ranks as (N, C, L, 1). Loaded with loader.py's policy.

On bf16 words (x, g: uint16 storage; per-channel operands float32 or bf16) the form runs
with its full-size operands widened on load and its results rounded on store
(`_on_words`), in float32 between: a bf16 call's one pass, the values of the float32 op
rounded once (ops/bf16_eager.py runs these as ``bf16_widens`` implementations).
"""
from __future__ import annotations

import numpy as np

from .... import bf16 as _bf16
from ....ops.batchnorm_prim import backward_form, forward_form
from ....threads import WAKE_WORK, parallel_work
from .loader import lowered, one_group, rendered

__all__ = ["forward", "backward"]

_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_F32 = np.dtype(np.float32)
_forms: dict = {}    # (form, dtype, layouts, size-1 pattern, eps) -> (positions, outputs, nest, passes)
_calls: dict = {}    # the same plus the variant -> the loaded kernel's entry
_bound: dict = {}    # (form name, shape, dtype, layouts, eps, rounds) -> a serial call's (kernel, positions, ...)


def _lower(form, shapes, layouts, cm: int, eps: float):
    """`form` traced over operands of these (shape, dtype), scheduled and lowered with
    the full-shape operands in `layouts` ("flat" or "cm"), output `cm` written
    channel-major (-1: none): (graph input positions, graph output positions, nest).
    Raises where the form is not one channel group."""
    from ... import loopnest
    graph, group = one_group(lambda *xs: form(*xs, eps=eps), shapes, form.__name__)
    if not group.rows:
        raise ValueError(f"{form.__name__} is not one channel group")
    if set(group.outputs) != set(graph.outputs):
        raise ValueError(f"{form.__name__}'s channel group writes other values than its results")
    group.cm_outputs = frozenset([graph.outputs[cm]] if cm >= 0 else [])
    inputs = list(graph.inputs)
    positions = [inputs.index(v) for v in group.inputs]
    lays = tuple(layouts[p] if lay != "scalar" and tuple(v.aval.shape) == tuple(shapes[0][0]) else lay
                 for p, v, lay in zip(positions, group.inputs, loopnest.operand_layouts(group)))
    outputs = [list(graph.outputs).index(v) for v in group.outputs]
    nest = loopnest.lower(group, lays)
    from ...rowpasses import schedule
    return positions, outputs, nest, len(schedule(nest).passes)


def _as4(a):
    """`a` (N, C, ...) as (N, C, H, W): (N, C, L, 1) for other ranks (a view: 'A' order kept)."""
    if a.ndim == 4:
        return a
    n, c = a.shape[0], a.shape[1]
    return a.reshape(n, c, 1, -1) if a.ndim != 2 else a.reshape(n, c, 1, 1)


def _operand(a):
    """(the array the kernel reads, its layout) of a full-shape (N, C, H, W) operand."""
    if a.flags.c_contiguous:
        return a, "flat"
    t = a.swapaxes(0, 1)
    if t.flags.c_contiguous:
        return t, "cm"
    return np.ascontiguousarray(a), "flat"


def _run(form, name: str, full: tuple, chan: tuple, outs: list, cm: int, eps: float) -> bool:
    """Run `form`'s kernel over `full` ((N, C, H, W) operands), `chan` ((1, C, 1, 1)
    ones) and 1 / (N*H*W) into `outs` (its results' arrays, in the form's order; output `cm` a (C, N, H, W)
    buffer); False (nothing written) where no kernel is loaded."""
    x = full[0]
    dt = x.dtype
    words = dt == _bf16.STORAGE
    if (dt not in _DTYPES and not words) or not x.size or any(a.dtype != dt for a in full):
        return False
    ops = [_operand(a) for a in full]
    shape = x.shape
    layouts = tuple(lay for _, lay in ops) + ("ndc",) * len(chan) + ("scalar",)
    words_out = words and outs[0].dtype == _bf16.STORAGE
    # the loaded serial kernel of this call's signature: its call made without the steps below
    bound = _bound.get((name, shape, dt, layouts, eps, words_out))
    if bound is not None:
        fn, positions, outputs, inv = bound
        arrays = [a for a, _ in ops] + list(chan) + [inv]
        fn(*[arrays[p] for p in positions], *[outs[k] for k in outputs], *shape)
        return True
    cdt = _F32 if words else dt      # (the computing dtype)
    inv = np.full(1, 1.0 / (shape[0] * shape[2] * shape[3]), cdt)
    arrays = [a for a, _ in ops] + list(chan) + [inv]
    key = (name, dt.name, layouts, tuple(d == 1 for d in shape), float(eps), words_out)
    shapes = lambda: ([(shape, "bfloat16" if words else dt.name)] * len(full)  # noqa: E731
                      + [((1, shape[1], 1, 1), cdt.name)] * len(chan) + [((1,), cdt.name)])
    traced = _on_words(form, len(full), words_out) if words else form
    got = lowered(_forms, key, lambda: _lower(traced, shapes(), layouts, cm, eps))
    if got is None:
        return False
    positions, outputs, nest, passes = got
    parallel = parallel_work(x.size * passes)   # (numba's count now)
    fn = _calls.get(key + (parallel,))
    if fn is None:
        fn = rendered(("channels",) + key + (parallel,), nest, parallel, steady=True)
        if fn is None:
            return False
        _calls[key + (parallel,)] = fn
    if x.size * passes < WAKE_WORK:    # (serial at any thread count)
        _bound[(name, shape, dt, layouts, eps, words_out)] = fn, positions, outputs, inv
    fn(*[arrays[p] for p in positions], *[outs[k] for k in outputs], *shape)
    return True


def _on_words(form, n: int, rounds: bool):
    """`form` over bf16 full-size operands (its first `n`): each widened to float32, each
    result rounded to bf16 where `rounds` (the kernel loads the words and stores them)."""
    from .... import dtypes

    def widened(*xs, eps: float):
        outs = form(*[x.float() for x in xs[:n]], *xs[n:], eps=eps)
        return tuple(o.to(dtypes.bfloat16) for o in outs) if rounds else outs
    widened.__name__ = form.__name__
    return widened


def _channel(a, c: int, dt):
    if a.dtype == _bf16.STORAGE:
        a = _bf16.to_float32(a)
    return np.ascontiguousarray(a, dt).reshape(1, c, 1, 1)


def _computing(x, *chan):
    """The dtype x's kernel computes in: float32 for bf16 words whose per-channel operands
    are float32 or bf16, else x's own; None where no kernel takes the call."""
    if x.dtype != _bf16.STORAGE:
        return x.dtype
    return _F32 if all(a.dtype == _F32 or a.dtype == _bf16.STORAGE for a in chan) else None


# ---------------------------------------------------------------- the primitives' implementations
# (registered by implementations.py: arrays and params in, the record out, or None while
# the kernel is not loaded and the numpy form runs)
def forward(x, weight, bias, eps):
    """batch_norm_forward's record: the normalized x (C-contiguous), then mean and variance."""
    c, size = x.shape[1], x.size
    cdt = _computing(x, weight, bias)
    if cdt is None or (size == x.shape[0] * c and x.dtype in _DTYPES):
        # (one value per channel and sample, as BatchNorm1d's (N, C): the numpy form's column
        # sums run along rows, 3x faster than the kernel's strided channel walks)
        return None
    x4 = _as4(x)
    # (batchnorm_prim._grad_dtype: a float32 record, statistics included, for a float32 weight)
    rec = np.empty(size + 2 * c, cdt if weight.dtype == _F32 else x.dtype)
    outs = [rec[:size].reshape(x4.shape), rec[size:size + c].reshape(1, c, 1, 1),
            rec[size + c:].reshape(1, c, 1, 1)]
    chan = (_channel(weight, c, cdt), _channel(bias, c, cdt))
    return rec if _run(forward_form, "forward", (x4,), chan, outs, -1, eps) else None


def backward(g, x, stats, weight, eps):
    """batch_norm_backward's record: the input gradient channel-major, then (sum g,
    sum g*xhat)."""
    c, size = x.shape[1], x.size
    cdt = _computing(x, stats, weight)
    if tuple(g.shape) != tuple(x.shape) or cdt is None:
        return None
    x4 = _as4(x)
    n, _, h, w = x4.shape
    # (batchnorm_prim._grad_dtype: float32 gradients for a float32 weight)
    out = np.empty(size + 2 * c, cdt if weight.dtype == _F32 else x.dtype)
    outs = [out[:size].reshape(c, n, h, w), out[size:size + c].reshape(1, c, 1, 1),
            out[size + c:].reshape(1, c, 1, 1)]
    chan = (_channel(stats[0], c, cdt), _channel(stats[1], c, cdt), _channel(weight, c, cdt))
    return out if _run(backward_form, "backward", (_as4(g), x4), chan, outs, 0, eps) else None


forward.bf16_widens = backward.bf16_widens = True   # (ops/bf16_eager.py: they take bf16 words)
