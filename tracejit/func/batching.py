"""Batched ``vmap``: the function traced once on one sample's shapes, then its graph run
once over the whole batch, each primitive given the batch as a leading dim by its
batching rule (functorch's batching rules, JAX's batched interpretation of a jaxpr).

The values of that run are ordinary eager tensors, so the ops record the usual autograd
graph: gradients flow through ``vmap``, and a ``grad``/``vjp`` inside the function (traced
as its backward's equations) runs as one batched backward pass.

A rule by kind: elementwise ops (and broadcasting reads) align each batched operand's
dims with the output's; reductions shift their ``dims``; matmul kinds batch their leading
dims. Any other primitive batches where its record declares ``extra["batch"]``:
``(n, params, *avals) -> params`` for the call where every operand carries the leading
batch dim of size n (avals: one sample's operands), or a function of those operands giving
the batched result (a composition), or None where it cannot. A primitive
without a rule, or a function that cannot be traced (it reads values, writes state),
raises `Unbatchable`: `vmap` then runs the per-sample loop and says so in the
``fallback`` log.
"""
from __future__ import annotations

from ..ops.eager import bind
from ..ops.host_steps import HOST_STEP
from ..ops.linalg import MATMUL
from ..ops.registry import Aval, shift_dims
from ..tensor import Tensor
from ..jit.ir import Literal, Var

__all__ = ["Unbatchable", "run_batched"]


class Unbatchable(Exception):
    """The call cannot run batched (the message says why); `vmap` loops instead."""


def _rule(prim):
    hook = prim.extra.get("batch")
    if hook is None and prim.kind == "reduction":
        hook = shift_dims
    return hook


def _pad(v: Tensor, aval: Aval, rank: int, n: int) -> Tensor:
    """Batched `v` (one sample: `aval`) with dims of 1 after the batch dim up to `rank`."""
    if aval.ndim >= rank:
        return v
    return v.reshape((n,) + (1,) * (rank - aval.ndim) + tuple(aval.shape))


def _batched_all(vals, avals, n):
    return [v if b or not isinstance(v, Tensor) else v.expand((n,) + tuple(av.shape))
            for (v, b), av in zip(vals, avals)]


def _matmul(e, vals, avals, n):
    """Batched operands' leading dims after the batch dim; a batched vector operand of
    matmul is a 1-row (1-column) matrix, that dim dropped after."""
    rank = max(2, *(av.ndim for av in avals))
    squeeze, out = [], []
    for k, ((v, b), av) in enumerate(zip(vals, avals)):
        if b and av.ndim == 1:
            if e.prim is not MATMUL:
                raise Unbatchable(f"{e.prim.name} of a vector")
            av = Aval((1,) + av.shape if k == 0 else av.shape + (1,), av.dtype, av.device)
            v = v.reshape((n,) + tuple(av.shape))
            squeeze.append(-2 if k == 0 else -1)
        out.append(_pad(v, av, rank, n) if b else v)
    r = bind(e.prim, *out, **e.params)
    for d in sorted(squeeze):
        r = r.squeeze(d)
    return r


RANDOM_ERROR = ("vmap: called random operation while in randomness error mode. Please either use the "
                "'same' or 'different' randomness flags on vmap or perform the randomness operation out of vmap")


def _step(e, vals, n: int, randomness: str):
    """`e` run over the batch: (value, batched)."""
    prim, params = e.prim, e.params
    avals = [a.aval for a in e.inputs]
    if prim.kind == "control" or prim is HOST_STEP or len(e.outs) != 1:
        raise Unbatchable(f"no batching rule for {prim.name}")
    if prim.kind == "random":
        if randomness == "error":
            raise RuntimeError(RANDOM_ERROR)
        if randomness == "same" and not any(b for _, b in vals):
            return bind(prim, *(v for v, _ in vals), **params), False
    elif not any(b for _, b in vals):
        return bind(prim, *(v for v, _ in vals), **params), False
    rank = e.outs[0].aval.ndim
    if prim.kind == "elementwise":
        out = bind(prim, *(_pad(v, av, rank, n) if b else v for (v, b), av in zip(vals, avals)), **params)
    elif prim.kind == "matmul":
        out = _matmul(e, vals, avals, n)
    else:
        hook = _rule(prim)
        new = hook(n, params, *avals) if hook is not None else None
        if new is None:
            raise Unbatchable(f"no batching rule for {prim.name}"
                              + (f" with {params}" if hook is not None else ""))
        ops = _batched_all(vals, avals, n)
        if prim.extra.get("broadcast_read"):
            ops = [_pad(v, av, rank, n) for v, av in zip(ops, avals)]
        out = new(*ops) if callable(new) else bind(prim, *ops, **new)
    want = (n,) + tuple(e.outs[0].aval.shape)
    if tuple(out.shape) != want:   # (a rule's slip loops, it does not give wrong values)
        raise Unbatchable(f"the batching rule of {prim.name} gave shape {tuple(out.shape)}, not {want}")
    return out, True


def _live(graph) -> list:
    """`graph`'s equations that its outputs read, in order. A traced ``grad`` records each
    VJP's gradients for every operand, also those nothing reads (a weight's, a
    per-sample outer product, where only the input's gradient is asked for); run
    batched, they are the costliest ops. Random draws stay: each one advances the
    generator (or raises under randomness="error") whether or not it is read."""
    live = {a for a in graph.outputs if isinstance(a, Var)}
    kept = []
    for e in reversed(graph.eqns):
        if e.prim.kind == "random" or any(o in live for o in e.outs):
            kept.append(e)
            live.update(a for a in e.inputs if isinstance(a, Var))
    kept.reverse()
    return kept


def run_batched(graph, args: list, batched: list, n: int, randomness: str) -> list:
    """`graph` (traced on one sample) run on `args`, those flagged in `batched` with the
    batch of size `n` as their dim 0: its outputs as (value, batched) pairs."""
    env = dict(zip(graph.inputs, zip(args, batched)))

    def read(a):
        return (a.value, False) if isinstance(a, Literal) else env[a]

    for e in _live(graph):
        env[e.outs[0]] = _step(e, [read(a) for a in e.inputs], n, randomness)
    return [read(a) for a in graph.outputs]
