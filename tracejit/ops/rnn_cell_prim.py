"""The LSTM cell's gate math as one primitive (eager recurrent layers), with its VJP.

Why a primitive: written with elementwise ops, one LSTM step's gate math (the add of the
input and hidden projections, three sigmoids, two tanh, the cell update) is about 13
eager op calls forward and some 25 backward, each a pass over a (batch, hidden) block
plus the per-op dispatch and graph bookkeeping. An eager LSTM runs it once per time step
and layer (128 times in a 2-layer, 64-step step), so that was the largest non-GEMM item
of the eager LSTM step. PyTorch has the same fused pair (``_thnn_fused_lstm_cell`` and
its backward; its CPU LSTM is one oneDNN layer call).

``lstm_cell(gi, gh, c, dim)``: ``gates = gi + gh``, split into i, f, g, o along `dim`
(PyTorch's gate order); returns one tensor ``stack([h', c'])`` of shape ``(2,) +
c.shape`` (the registry's primitives have one output), with ``c' = sigmoid(f) * c +
sigmoid(i) * tanh(g)`` and ``h' = sigmoid(o) * tanh(c')``. `dim` is the gate axis: -1 for
the (N, 4H) layout, 0 for the feature-major (4H, N) layout the eager layers use (there
each gate block is contiguous).

The VJP: in a plain eager backward (no graph recorded, no tracer) it calls
``lstm_cell_backward``, one vectorized pass set over the block that returns the gate
gradient and the incoming cell state's gradient side by side (``(..., 5H)`` along
`dim`). When the backward itself is recorded (``create_graph=True``) or traced (the
compiled autodiff), the VJP is the same formula written with tracejit ops, so higher
derivatives are exact and the compiler can fuse it; ``lstm_cell_backward`` is therefore
never recorded and has no VJP of its own.

Captured LSTM layers do not use this primitive: `nn/recurrent.py` keeps the composite
form under a tracer, which the compiler fuses into one kernel per step.
"""
from __future__ import annotations

import contextlib

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled
from ..errors import DTypeError, ShapeError
from .elementwise import sigmoid, tanh
from .indexing import getitem
from .registry import Aval, bind, defprim, trace_state
from .shape import cat, chunk

__all__ = ["lstm_cell"]


def _gate_dim(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise IndexError(f"lstm_cell: dim {dim} is out of range for {ndim}-D gates")
    return dim % ndim


def _errstate(xp):
    # exp(-x) overflows to inf for x < -88 (float32); 1 / (1 + inf) = 0 is the right limit
    return xp.errstate(over="ignore") if hasattr(xp, "errstate") else contextlib.nullcontext()


def _sigmoid_(xp, a):
    """sigmoid in place, as 1 / (1 + exp(-a)) (four vectorized passes, no branch)."""
    xp.negative(a, out=a)
    xp.exp(a, out=a)
    a += 1
    xp.reciprocal(a, out=a)
    return a


def _blocks(a, dim: int, n: int):
    size = a.shape[dim] // n
    lead = (slice(None),) * dim
    return [a[lead + (slice(k * size, (k + 1) * size),)] for k in range(n)]


def _activated(xp, gi, gh, dim):
    """i, f, g, o after their nonlinearities (views into one new array)."""
    gates = gi + gh
    i, f, g, o = _blocks(gates, dim, 4)
    with _errstate(xp):
        _sigmoid_(xp, _blocks(gates, dim, 2)[0])      # i and f are adjacent: one block
        _sigmoid_(xp, o)
    xp.tanh(g, out=g)
    return i, f, g, o


def _lstm_cell_impl(xp, gi, gh, c, dim):
    i, f, g, o = _activated(xp, gi, gh, dim)
    out = xp.empty((2,) + c.shape, dtype=c.dtype)
    h_new, c_new = out[0], out[1]
    xp.multiply(f, c, out=c_new)
    i *= g
    c_new += i
    xp.tanh(c_new, out=h_new)
    h_new *= o
    return out


def _lstm_cell_rule(gi: Aval, gh: Aval, c: Aval, dim):
    if gi.shape != gh.shape:
        raise ShapeError(f"lstm_cell: the input projection {gi.shape} and the hidden projection "
                         f"{gh.shape} must have one shape")
    if not gi.shape:
        raise ShapeError("lstm_cell: the gates must have at least one dim, got a 0-d tensor")
    d = _gate_dim(dim, len(gi.shape))
    expect = gi.shape[:d] + (gi.shape[d] // 4,) + gi.shape[d + 1:]
    if gi.shape[d] % 4 or c.shape != expect:
        raise ShapeError(f"lstm_cell: gates of shape {gi.shape} (4 gates along dim {dim}) need a "
                         f"cell state of shape {expect}, got {c.shape}")
    for name, a in (("gi", gi), ("gh", gh), ("c", c)):
        if not a.dtype.is_floating_point or a.dtype is not gi.dtype:
            raise DTypeError(f"lstm_cell: expected floating point gi, gh and c of one dtype, got "
                             f"{name} of dtype {a.dtype.name} (gi: {gi.dtype.name})")
    return Aval((2,) + tuple(c.shape), gi.dtype, gi.device)


def _lstm_cell_backward_impl(xp, g, gi, gh, c, out, dim):
    i, f, gg, o = _activated(xp, gi, gh, dim)
    dh, dc_in = g[0], g[1]
    t = xp.tanh(out[1])
    res = xp.empty(gi.shape[:dim] + (gi.shape[dim] // 4 * 5,) + gi.shape[dim + 1:], dtype=gi.dtype)
    di, df, dg, do, dc = _blocks(res, dim, 5)
    # do = dh * t * o * (1 - o)
    xp.subtract(1, o, out=do)
    do *= o
    do *= dh
    do *= t
    # dct = dc_in + dh * o * (1 - t^2)     (kept in dc, then dc_prev = dct * f)
    xp.multiply(t, t, out=t)
    xp.subtract(1, t, out=t)
    t *= o
    t *= dh
    xp.add(t, dc_in, out=dc)
    # di = dct * g * i * (1 - i)
    xp.subtract(1, i, out=di)
    di *= i
    di *= gg
    di *= dc
    # dg = dct * i * (1 - g^2)
    xp.multiply(gg, gg, out=dg)
    xp.subtract(1, dg, out=dg)
    dg *= i
    dg *= dc
    # df = dct * c * f * (1 - f)
    xp.subtract(1, f, out=df)
    df *= f
    df *= c
    df *= dc
    dc *= f
    return res


def _lstm_cell_backward_rule(g: Aval, gi: Aval, gh: Aval, c: Aval, out: Aval, dim):
    d = _gate_dim(dim, len(gi.shape))
    return Aval(gi.shape[:d] + (gi.shape[d] // 4 * 5,) + gi.shape[d + 1:], gi.dtype, gi.device)


LSTM_CELL_BACKWARD = defprim("lstm_cell_backward", _lstm_cell_backward_impl, _lstm_cell_backward_rule,
                             None, kind="other")


def _composite_backward(g, gi, gh, c, dim):
    """The VJP as tracejit ops (differentiable, fusable): -> (d gates, d c)."""
    i, f, gg, o = chunk(gi + gh, 4, dim)
    i, f, gg, o = sigmoid(i), sigmoid(f), tanh(gg), sigmoid(o)
    t = tanh(f * c + i * gg)
    dh, dc = getitem(g, 0), getitem(g, 1)
    dct = dc + dh * o * (1.0 - t * t)
    d_gates = cat([dct * gg * i * (1.0 - i), dct * c * f * (1.0 - f), dct * i * (1.0 - gg * gg),
                   dh * t * o * (1.0 - o)], dim)
    return d_gates, dct * f


def _lstm_cell_vjp(g, out, gi, gh, c, dim):
    if is_grad_enabled() or trace_state.tracer is not None:
        d_gates, d_c = _composite_backward(g, gi, gh, c, dim)
        return d_gates, d_gates, d_c
    res = bind(LSTM_CELL_BACKWARD, g, gi, gh, c, out, dim=dim)
    four = gi.shape[dim]
    lead = (slice(None),) * dim
    d_gates = getitem(res, lead + (slice(0, four),))
    return d_gates, d_gates, getitem(res, lead + (slice(four, None),))


LSTM_CELL = defprim("lstm_cell", _lstm_cell_impl, _lstm_cell_rule, _lstm_cell_vjp, kind="other",
                    save=lambda rq: (0, 1, 2), save_out=True, grad_name="LstmCellBackward0")


def lstm_cell(gi, gh, c, dim: int = -1):
    """``stack([h', c'])`` of one LSTM step from the input projection `gi`, the hidden
    projection `gh` (same shape, 4 gates i, f, g, o along `dim`) and the cell state `c`."""
    return bind(LSTM_CELL, gi, gh, c, dim=_gate_dim(dim, gi.ndim))


# ---------------------------------------------------------------- a whole eager LSTM layer
# One layer and direction over a sequence, feature-major, as two primitives: the forward
# and the backward time loops. Each step is one GEMM plus the gate math of `lstm_cell`
# above on (H, N) blocks; the loop runs inside the op, so an eager layer costs two op
# calls instead of a graph node (or three) per time step. PyTorch's CPU LSTM is the same
# kind of call (oneDNN's rnn layer forward and backward). `nn/lstm_layer.py` makes the
# pair differentiable (an autograd Function; its create_graph path is written with
# tracejit ops), so neither primitive has a VJP of its own.
#
# Layouts: gi (L, 4H, N), step t's input projection in feature-major order (any strides:
# the layer passes a permuted view of one (4H, L*N) GEMM result); w (4H, H); h0, c0
# (H, N). The forward's result Z is (L, 6H, N): per step h_t (rows 0:H), c_t (H:2H) and
# the activated gates i, f, g, o (2H:6H), which the backward reads instead of
# recomputing the step's GEMM.

def _matmul_into(xp, a, b):
    if xp.__name__ == "numpy":
        from .linalg import _blas_matmul   # the BLAS thread policy of every eager product
        return _blas_matmul(a, b)
    return xp.matmul(a, b)


def _order(L: int, reverse: bool):
    return range(L - 1, -1, -1) if reverse else range(L)


def _lstm_layer_impl(xp, gi, w, h0, c0, reverse=False):
    L, four, N = gi.shape
    H = four // 4
    Z = xp.empty((L, 6 * H, N), dtype=gi.dtype)
    h, c = h0, c0
    with _errstate(xp):
        for t in _order(L, reverse):
            z = Z[t]
            gates = z[2 * H:]
            xp.add(gi[t], _matmul_into(xp, w, h), out=gates)
            _sigmoid_(xp, gates[:2 * H])                        # i, f
            _sigmoid_(xp, gates[3 * H:])                        # o
            g = gates[2 * H:3 * H]
            xp.tanh(g, out=g)
            i, f, o = gates[:H], gates[H:2 * H], gates[3 * H:]
            c_new, h_new = z[H:2 * H], z[:H]
            xp.multiply(f, c, out=c_new)
            ig = i * g
            c_new += ig
            xp.tanh(c_new, out=h_new)
            h_new *= o
            h, c = h_new, c_new
    return Z


def _lstm_layer_rule(gi: Aval, w: Aval, h0: Aval, c0: Aval, reverse=False):
    if len(gi.shape) != 3 or len(w.shape) != 2:
        raise ShapeError(f"lstm_layer: expected gi (L, 4H, N) and w (4H, H), got {gi.shape} and {w.shape}")
    L, four, N = gi.shape
    H = w.shape[1]
    if four != 4 * H or w.shape[0] != 4 * H or h0.shape != (H, N) or c0.shape != (H, N):
        raise ShapeError(f"lstm_layer: gi {gi.shape}, w {w.shape}, h0 {h0.shape} and c0 {c0.shape} do "
                         f"not fit gi (L, 4H, N), w (4H, H), h0 and c0 (H, N)")
    for name, a in (("w", w), ("h0", h0), ("c0", c0)):
        if a.dtype is not gi.dtype or not a.dtype.is_floating_point:
            raise DTypeError(f"lstm_layer: expected floating point operands of one dtype, got {name} "
                             f"of dtype {a.dtype.name} (gi: {gi.dtype.name})")
    return Aval((L, 6 * H, N), gi.dtype, gi.device)


LSTM_LAYER = defprim("lstm_layer", _lstm_layer_impl, _lstm_layer_rule, None, kind="other")


def _lstm_layer_backward_impl(xp, d_out, d_hn, d_cn, Z, w, h0, c0, reverse=False):
    """-> one flat array: d gi as (4H, L, N) (so that (4H, L*N) is a free reshape) | d w
    (4H, H) | d h0 (H, N) | d c0 (H, N)."""
    L, six, N = Z.shape
    H = six // 6
    n_g = 4 * H * L * N
    res = xp.empty(n_g + 4 * H * H + 2 * H * N, dtype=Z.dtype)
    G = res[:n_g].reshape(4 * H, L, N)
    wt = xp.ascontiguousarray(w.T)
    order = list(_order(L, reverse))
    dh, dc = d_hn, d_cn
    dg = xp.empty((4 * H, N), dtype=Z.dtype)
    di, df, dgg, do = dg[:H], dg[H:2 * H], dg[2 * H:3 * H], dg[3 * H:]
    for k in range(L - 1, -1, -1):
        t = order[k]
        z = Z[t]
        c_t = z[H:2 * H]
        i, f, g, o = z[2 * H:3 * H], z[3 * H:4 * H], z[4 * H:5 * H], z[5 * H:]
        c_prev = c0 if k == 0 else Z[order[k - 1], H:2 * H]
        dh = dh + d_out[t]
        tc = xp.tanh(c_t)
        # do = dh * tanh(c) * o * (1 - o)
        xp.subtract(1, o, out=do)
        do *= o
        do *= dh
        do *= tc
        # dct = dc + dh * o * (1 - tanh(c)^2)
        tc *= tc
        xp.subtract(1, tc, out=tc)
        tc *= o
        tc *= dh
        tc += dc
        dct = tc
        xp.subtract(1, i, out=di)           # di = dct * g * i * (1 - i)
        di *= i
        di *= g
        di *= dct
        xp.multiply(g, g, out=dgg)          # dg = dct * i * (1 - g^2)
        xp.subtract(1, dgg, out=dgg)
        dgg *= i
        dgg *= dct
        xp.subtract(1, f, out=df)           # df = dct * c_prev * f * (1 - f)
        df *= f
        df *= c_prev
        df *= dct
        G[:, t] = dg
        dc = dct * f
        dh = _matmul_into(xp, wt, dg)
    # d w = sum_t dg_t @ h_{t-1}^T: one GEMM over all steps, h_{t-1} gathered in G's order
    hprev = xp.empty((H, L, N), dtype=Z.dtype)
    for k, t in enumerate(order):
        hprev[:, t] = h0 if k == 0 else Z[order[k - 1], :H]
    dw = _matmul_into(xp, G.reshape(4 * H, L * N), hprev.reshape(H, L * N).T)
    res[n_g:n_g + 4 * H * H] = dw.reshape(-1)
    res[n_g + 4 * H * H:n_g + 4 * H * H + H * N] = dh.reshape(-1)
    res[n_g + 4 * H * H + H * N:] = dc.reshape(-1)
    return res


def _lstm_layer_backward_rule(d_out: Aval, d_hn: Aval, d_cn: Aval, Z: Aval, w: Aval, h0: Aval, c0: Aval,
                              reverse=False):
    L, six, N = Z.shape
    H = six // 6
    if d_out.shape != (L, H, N) or d_hn.shape != (H, N) or d_cn.shape != (H, N):
        raise ShapeError(f"lstm_layer_backward: gradients {d_out.shape}, {d_hn.shape}, {d_cn.shape} do "
                         f"not fit the layer's (L, H, N) = {(L, H, N)}")
    return Aval((4 * H * L * N + 4 * H * H + 2 * H * N,), Z.dtype, Z.device)


LSTM_LAYER_BACKWARD = defprim("lstm_layer_backward", _lstm_layer_backward_impl, _lstm_layer_backward_rule,
                              None, kind="other")


def lstm_layer(gi, w, h0, c0, reverse: bool = False):
    """The forward time loop of one LSTM layer (see above): -> Z (L, 6H, N). Not
    differentiable by itself: `tracejit.nn.lstm_layer.lstm_layer_fm` is."""
    return bind(LSTM_LAYER, gi, w, h0, c0, reverse=bool(reverse))


def lstm_layer_backward(d_out, d_hn, d_cn, Z, w, h0, c0, reverse: bool = False):
    """The backward time loop of `lstm_layer`: -> the flat (d gi | d w | d h0 | d c0)."""
    return bind(LSTM_LAYER_BACKWARD, d_out, d_hn, d_cn, Z, w, h0, c0, reverse=bool(reverse))
