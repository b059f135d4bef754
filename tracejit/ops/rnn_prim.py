"""An Elman RNN layer's time loops (tanh or relu) as primitives: ``rnn_layer``,
``rnn_layer_backward``.

As ops/lstm_prim.py for the LSTM: each time loop is one op (per step the GEMM ``W h`` and
one pass), eager and compiled alike. The layer's result is its states themselves, so
``rnn_layer`` is differentiable as it is: its VJP is ``rnn_layer_backward``, whose own VJP
recomputes the layer with tracejit ops.

Layouts as the LSTM's: gi (L, N, H) the input projection (with b_ih); w (H, H) = W_hh;
b (H,) = b_hh; feature-major h0 (H, N); the result every step's h (L, H, N).
"""
from __future__ import annotations

from ..errors import ShapeError
from .lstm_prim import (_order, backward_parts, backward_steps, check_batch_sizes,  # the LSTM's helpers
                        check_float_operands, finish_backward, forward_steps, packed_params, unpack_parts,
                        zero_inactive)
from .registry import Aval, defprim
from .eager import bind

__all__ = ["rnn_layer", "rnn_layer_backward", "unpack_backward"]

NONLINEARITIES = ("tanh", "relu")


def _rnn_layer_impl(xp, gi, w, b, h0, reverse=False, nonlinearity="tanh", batch_sizes=None):
    L, N, H = gi.shape
    out = xp.empty((L, H, N), dtype=gi.dtype)
    return forward_steps(xp, _STEPS[nonlinearity], gi, w, b, h0, out, reverse, batch_sizes)


def _step(activate):
    """One step of the numpy form (lstm_prim.py `forward_steps`): p = h' (H, N)."""
    def step(xp, g, m, b, h, c, p):
        xp.add(g, m, out=p)
        p += b
        return activate(xp, p), None
    return step


_STEPS = {"tanh": _step(lambda xp, p: xp.tanh(p, out=p)),
          "relu": _step(lambda xp, p: xp.maximum(p, 0, out=p))}


def _check(name: str, gi: Aval, w: Aval, b: Aval, h0: Aval, nonlinearity, batch_sizes=None) -> None:
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"{name}: unknown nonlinearity {nonlinearity!r}; expected 'tanh' or 'relu'")
    if len(gi.shape) != 3 or len(w.shape) != 2:
        raise ShapeError(f"{name}: expected gi (L, N, H) and w (H, H), got {gi.shape} and {w.shape}")
    L, N, H = gi.shape
    if w.shape != (H, H) or b.shape != (H,) or h0.shape != (H, N):
        raise ShapeError(f"{name}: gi {gi.shape}, w {w.shape}, b {b.shape} and h0 {h0.shape} do not fit "
                         f"gi (L, N, H), w (H, H), b (H,), h0 (H, N)")
    check_float_operands(name, gi, w=w, b=b, h0=h0)
    check_batch_sizes(name, batch_sizes, L, N)


def _rnn_layer_rule(gi: Aval, w: Aval, b: Aval, h0: Aval, reverse=False, nonlinearity="tanh",
                    batch_sizes=None):
    _check("rnn_layer", gi, w, b, h0, nonlinearity, batch_sizes)
    L, N, H = gi.shape
    return Aval((L, H, N), gi.dtype, gi.device)


def _rnn_layer_vjp(g, out, gi, w, b, h0, reverse=False, nonlinearity="tanh", batch_sizes=None):
    res = rnn_layer_backward(g, gi, w, b, h0, out, reverse, nonlinearity, batch_sizes)
    return unpack_backward(res, gi.shape[0], h0.shape[1], h0.shape[0])


RNN_LAYER = defprim("rnn_layer", _rnn_layer_impl, _rnn_layer_rule, _rnn_layer_vjp, kind="other",
                    save=lambda rq: (0, 1, 2, 3), save_out=True)


# The backward's flat result: ops/lstm_prim.py `backward_parts` of 1 gate,
# d w (H*H) | d b (H) | d h0 (H*N) | d gi (L*N*H).
def _rnn_layer_backward_impl(xp, d_y, gi, w, b, h0, hs, reverse=False, nonlinearity="tanh",
                             batch_sizes=None):
    """d_y (L, H, N): the cotangent of every step's h (the last step's h_n included).
    gi and b are operands for this op's VJP (second derivatives) only."""
    L, H, N = hs.shape
    off = backward_parts(1, H, N)
    res = xp.empty(off[3] + H * L * N, dtype=hs.dtype)
    G = res[off[3]:].reshape(L, N, H)
    order = list(_order(L, reverse))
    dp = xp.empty((H, N), dtype=hs.dtype)

    def step_back(xp, t, k, dh, dc):
        # through the nonlinearity, from its output: tanh' = 1 - h^2; relu' = (h > 0)
        h = hs[t]
        xp.multiply(dh, 1 - h * h if nonlinearity == "tanh" else h > 0, out=dp)
        zero_inactive(dp, batch_sizes, t)
        G[t] = dp.T
        return dp, None, None

    dh, _ = backward_steps(xp, step_back, d_y, xp.zeros((H, N), dtype=hs.dtype), w, order, batch_sizes)
    return finish_backward(xp, res, off, G, hs, h0, (dh,), order)


def _rnn_layer_backward_rule(d_y: Aval, gi: Aval, w: Aval, b: Aval, h0: Aval, hs: Aval, reverse=False,
                             nonlinearity="tanh", batch_sizes=None):
    _check("rnn_layer_backward", gi, w, b, h0, nonlinearity, batch_sizes)
    L, N, H = gi.shape
    if d_y.shape != (L, H, N) or hs.shape != (L, H, N):
        raise ShapeError(f"rnn_layer_backward: gradient {d_y.shape} and states {hs.shape} do not fit the "
                         f"layer's (L, H, N) = {(L, H, N)}")
    return Aval((backward_parts(1, H, N)[3] + H * L * N,), hs.dtype, hs.device)


def _rnn_layer_backward_vjp(u, out, d_y, gi, w, b, h0, hs, reverse=False, nonlinearity="tanh",
                            batch_sizes=None):
    from .rnn_layer import backward_vjp   # the layer's forward written with tracejit ops
    return backward_vjp(u, d_y, gi, w, b, h0, reverse, nonlinearity, batch_sizes) + (None,)


RNN_LAYER_BACKWARD = defprim("rnn_layer_backward", _rnn_layer_backward_impl, _rnn_layer_backward_rule,
                             _rnn_layer_backward_vjp, kind="other", save=lambda rq: tuple(range(6)),
                             nondiff=(5,))


def rnn_layer(gi, w, b, h0, reverse: bool = False, nonlinearity: str = "tanh", batch_sizes=None):
    """The time loop of one Elman RNN layer and direction: -> every step's h (L, H, N),
    differentiable (its VJP is `rnn_layer_backward`); `tracejit.ops.rnn_layer.rnn_layer_fm`
    is the layer users reach. `batch_sizes`: a packed layer's per-step sequence counts
    (ops/lstm_prim.py `check_batch_sizes`)."""
    return bind(RNN_LAYER, gi, w, b, h0, **packed_params(reverse, batch_sizes), nonlinearity=nonlinearity)


def rnn_layer_backward(d_y, gi, w, b, h0, hs, reverse: bool = False, nonlinearity: str = "tanh",
                       batch_sizes=None):
    """The backward time loop of `rnn_layer` (hs its result): -> the flat
    (d w | d b | d h0 | d gi); `unpack_backward` splits it."""
    return bind(RNN_LAYER_BACKWARD, d_y, gi, w, b, h0, hs, **packed_params(reverse, batch_sizes),
                nonlinearity=nonlinearity)


def unpack_backward(res, L, N: int, H: int) -> tuple:
    """(d gi (L, N, H), d w (H, H), d b (H,), d h0 (H, N)) from `rnn_layer_backward`'s result."""
    return unpack_parts(res, L, N, H, 1)
