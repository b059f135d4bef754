"""One LSTM layer (one direction) over a whole sequence: one op forward, one backward
(why: the docstring of ops/lstm_prim.py), and what the three recurrent families share.

Eagerly, `_Layer` (an autograd Function, the LSTM's and the GRU's) runs a layer primitive
and gives its backward primitive the cotangents of the outputs it returns, so no cotangent
of the whole (L, 6H, N) result is assembled. `backward_vjp` recomputes the layer with
`lstm_cell` for higher derivatives (`recomputed_vjp`, the GRU's and the RNN's too).
Layout: x (L, N, I), w_ih (4H, I), w_hh (4H, H); states h0, c0 (H, N).
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

from .. import ops as _ops
from ..autograd.function import Function
from ..errors import CompileError
from .lstm_prim import layer_grads, lstm_layer, lstm_layer_backward, lstm_layer_states, unpack_backward
from .eager import trace_state

__all__ = ["lstm_layer_fm", "lstm_cell", "lstm_cell_fm", "backward_vjp"]


def lstm_cell(i, f, g, o, c) -> tuple:
    """The LSTM cell's math, written once for every tensor form (the recompute for second
    derivatives, nn.LSTMCell): gate pre-activations i, f, g, o (PyTorch's order) and the
    cell state c, blocks of one shape in any layout -> (h, c)."""
    c = _ops.sigmoid(f) * c + _ops.sigmoid(i) * _ops.tanh(g)
    h = _ops.sigmoid(o) * _ops.tanh(c)
    return h, c


def lstm_cell_fm(pre, c) -> tuple:
    """One LSTM step, feature-major: `pre` (4H, N) is the gates' pre-activation
    (x W_ih^T + h W_hh^T + biases, transposed), c (H, N) the cell state. -> (h, c)."""
    return lstm_cell(*_ops.chunk(pre, 4, 0), c)


class Family(NamedTuple):
    """A recurrent family's eager layer (`_Layer`): ``layer(*ins, reverse, batch_sizes)``
    -> Z; ``backward(*cotangents, *ins, Z, reverse, batch_sizes)`` -> the flat result,
    ``grads(res, ins)`` its inputs' gradients; ``states`` the layer's states besides h
    (the LSTM's c). The inputs end with w (G*H, H), b and the initial states, the first
    is (L, N, .)."""
    layer: Callable
    backward: Callable
    grads: Callable
    states: int


class _Layer(Function):
    """One eager layer of a `Family`: (h of every step (L, H, N), h_n[, c_n]) from Z's first
    rows, as views."""

    @staticmethod
    def forward(ctx, family, reverse, batch_sizes, *ins):
        ctx.set_materialize_grads(False)
        Z = family.layer(*ins, reverse, batch_sizes)
        ctx.family, ctx.reverse, ctx.batch_sizes = family, reverse, batch_sizes
        ctx.save_for_backward(*ins, Z)
        H, last = ins[-3 - family.states].shape[1], 0 if reverse else -1
        return (Z[:, :H],) + tuple(Z[last, k * H:(k + 1) * H] for k in range(1 + family.states))

    @staticmethod
    def backward(ctx, *cts):
        *ins, Z = ctx.saved_tensors
        L, N = ins[0].shape[0], ins[0].shape[1]
        H = ins[-3 - ctx.family.states].shape[1]
        zeros = lambda *s: _ops.zeros(s, dtype=Z.dtype, device=Z.device)  # noqa: E731
        cts = [(zeros(L, H, N) if k == 0 else zeros(H, N)) if c is None else c for k, c in enumerate(cts)]
        # Under create_graph this op is recorded too; its VJP is the family's `backward_vjp`.
        res = ctx.family.backward(*cts, *ins, Z, ctx.reverse, ctx.batch_sizes)
        return (None, None, None) + ctx.family.grads(res, ins)


LSTM = Family(lstm_layer, lstm_layer_backward, layer_grads, 1)


def lstm_layer_fm(x, wx, w, h0, c0, reverse: bool = False, bias=None, batch_sizes=None) -> tuple:
    """One LSTM layer and direction: x (L, N, I), wx = W_ih (4H, I), w = W_hh (4H, H), h0 and
    c0 (H, N), bias (4H,) or None (both biases summed). `batch_sizes`: a packed batch's
    per-step sequence counts (longest first); finished sequences' states are held.
    Returns (h of every step (L, H, N), h_n (H, N), c_n (H, N))."""
    if bias is None:
        bias = _ops.zeros(w.shape[0], dtype=w.dtype, device=w.device)
    if trace_state.tracer is not None:
        # captured: the primitives are the equations, so compiled graphs run the same
        # loops as eager and a symbolic length stays symbolic
        H = w.shape[1]
        Z = lstm_layer(x, wx, w, bias, h0, c0, reverse, batch_sizes)
        hc = lstm_layer_states(Z, x, wx, w, bias, h0, c0, reverse, batch_sizes)
        hs, cs = hc[:, :H], hc[:, H:]
        last = 0 if reverse else -1
        return hs, hs[last], cs[last]
    return _Layer.apply(LSTM, bool(reverse), None if batch_sizes is None else tuple(batch_sizes),
                        x, wx, w, bias, h0, c0)


# ---------------------------------------------------------------- higher derivatives
def _projection(x, wx):
    """The input projection x W_ih^T (L, N, 4H) with tracejit ops (recorded)."""
    L, N, I = x.shape
    return _ops.reshape(_ops.matmul(_ops.reshape(x, (L * N, I)), _ops.transpose(wx, 0, 1)), (L, N, wx.shape[0]))


def held(new, prev, batch_sizes, t: int):
    """`new` with the columns a packed layer holds at step t (ops/lstm_prim.py
    `hold_inactive`) taken from `prev`, with tracejit ops (recorded)."""
    if batch_sizes is None or batch_sizes[t] >= new.shape[1]:
        return new
    n = batch_sizes[t]
    return _ops.cat([new[:, :n], prev[:, n:]], 1)


def recompute_steps(cell, gi, w, b, h0, reverse: bool, batch_sizes=None, c0=None) -> list:
    """A recurrent layer's forward with tracejit ops (recorded), for second derivatives: per
    step ``cell(g, m, h, c)`` -> (h, c), a packed layer's held columns kept. -> every
    step's (h, c), in time order."""
    L = gi.shape[0]
    steps = [None] * L
    h, c = h0, c0
    bcol = _ops.reshape(b, (b.shape[0], 1))
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h_new, c_new = cell(_ops.transpose(gi[t], 0, 1), _ops.matmul(w, h) + bcol, h, c)
        h = held(h_new, h, batch_sizes, t)
        c = None if c is None else held(c_new, c, batch_sizes, t)
        steps[t] = (h, c)
    return steps


def twice_differentiated(outs: list, cts: list, ins: list, us, targets: list) -> tuple:
    """The VJP of a layer's backward from its recomputed forward: the first derivatives of
    `outs` (cotangents `cts`) in `ins`, recorded, then their VJP with `us` in `targets`.
    Every target's gradient is returned (the engine hands detached inputs, so requires_grad
    does not say which are wanted; it drops the rest)."""
    from ..autograd import grad
    first = grad(outs, ins, cts, create_graph=True, allow_unused=True)
    pairs = [(f, v) for f, v in zip(first, us) if f is not None]
    return tuple(grad([f for f, _ in pairs], targets, [v for _, v in pairs], create_graph=True,
                      allow_unused=True))


def _requiring(t):
    """A stand-in for `t` whose gradient autograd.grad can ask for: an alias in t's graph
    (so what is computed from it stays differentiable in t), or a detached copy when t
    needs no gradient."""
    return t * 1.0 if t.requires_grad else t.detach().requires_grad_(True)


def recomputed_vjp(layer: str) -> Callable:
    """A recurrent `layer`'s backward primitive's VJP (second derivatives), from a function
    that recomputes the forward with tracejit ops (`recompute_steps`) and differentiates it
    twice (`twice_differentiated`): eager only, with grad mode on (also when this backward
    itself runs without create_graph)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def vjp(*args, **kwargs) -> tuple:
            from ..autograd import enable_grad
            if trace_state.tracer is not None:
                raise CompileError(f"second derivatives of {layer} layer inside a compiled function are not "
                                   f"supported; take them eagerly (tracejit.eager()) or with create_graph=True "
                                   f"on the compiled function's output")
            with enable_grad():
                return fn(*args, **kwargs)
        return vjp
    return wrap


@recomputed_vjp("an LSTM")
def backward_vjp(u, d_y, d_hn, d_cn, x, wx, w, b, h0, c0, reverse: bool, batch_sizes=None) -> tuple:
    """VJP of ``lstm_layer_backward`` (second derivatives): its result is J^T d, so its VJP
    with u is J u for d and the derivative of <J^T d, u> for the inputs, both from autograd
    over the recomputed forward (`recompute_steps`), recorded, so higher orders are exact.
    -> gradients of (d_y, d_hn, d_cn, x, wx, w, b, h0, c0)."""
    L, N = x.shape[0], x.shape[1]
    H = w.shape[1]
    xs = [_requiring(t) for t in (x, wx)]
    gi = _projection(*xs)
    ins = [gi] + [_requiring(t) for t in (w, b, h0, c0)]
    ds = [_requiring(t) for t in (d_y, d_hn, d_cn)]
    steps = recompute_steps(lambda g, m, h, c: lstm_cell_fm(g + m, c), *ins[:4], reverse, batch_sizes, ins[4])
    last = 0 if reverse else L - 1
    full = d_y.shape[1] == 2 * H       # the cotangent of h and c (else of h only)
    outs, cts = [], []
    for t, (h, c) in enumerate(steps):
        dy = ds[0][t]
        outs.append(h)
        cts.append(dy[:H])
        if full:
            outs.append(c)
            cts.append(dy[H:])
    outs += [steps[last][0], steps[last][1]]
    cts += [ds[1], ds[2]]
    # u's parts in the order of `ins` (gi, w, b, h0, c0)
    return twice_differentiated(outs, cts, ins, unpack_backward(u, L, N, H), ds + xs + ins[1:])
