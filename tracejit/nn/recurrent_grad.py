"""Eager recurrent cells: a step's gate blocks as one autograd node (`chunk`), and
an LSTM cell's gate math as one (`lstm_cell_gates`).

`chunk` (ops/step_slices.py) makes the gate blocks one node whose backward writes each
block's gradient once, not a full-size zero tensor per block. An LSTMCell stepped by a
Python loop runs its gate math (~10 ops forward, ~20 backward) as `lstm_cell_gates`, one
node computed on the arrays, as PyTorch's eager cell is one fused kernel; under ``create_graph`` its backward differentiates the same
math in tracejit ops. An eager LSTMCell or GRUCell step on the CPU is `lstm_cell_step` /
`gru_cell_step`: the layer's two primitives on a one-step sequence inside one autograd node.
"""
from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..ops import registry as _reg
from ..ops.gru_prim import GRU_LAYER, GRU_LAYER_BACKWARD
from ..ops.lstm_prim import LSTM_LAYER, LSTM_LAYER_BACKWARD, _matmul, backward_parts
from ..ops.step_slices import chunk
from ..tensor import Tensor

__all__ = ["lstm_cell_gates", "lstm_cell_step", "gru_cell_step"]


def _cell_math(gates, c):
    """(h', c') from the gate pre-activations (i, f, g, o blocks) and c, with tracejit ops:
    the cell's one definition (ops/lstm_layer.py `lstm_cell`), which `_LSTMCellGates`
    computes on arrays."""
    from ..ops.lstm_layer import lstm_cell
    return lstm_cell(*chunk(gates, 4, -1), c)


class _LSTMCellGates(Function):
    """``_cell_math`` as one node: forward and backward on the arrays (CPU)."""

    @staticmethod
    def forward(ctx, gates, c):
        ctx.set_materialize_grads(False)
        x, cp = gates._data, c._data
        H = x.shape[-1] // 4
        # one tanh over all four blocks: sigmoid(v) = (1 + tanh(v / 2)) / 2 for i, f, o,
        # within an ulp or two of sigmoid's own form and ~3x faster than its exp and where
        t = np.tanh(x * _half_scale(H, x.dtype))
        s = t * x.dtype.type(0.5)
        s += x.dtype.type(0.5)
        s[..., 2 * H:3 * H] = t[..., 2 * H:3 * H]      # s: the four activations (g: tanh)
        si, sf, tg, so = s[..., :H], s[..., H:2 * H], s[..., 2 * H:3 * H], s[..., 3 * H:]
        c_new = sf * cp
        c_new += si * tg
        tc = np.tanh(c_new)
        h = so * tc
        ctx.arrays = (s, tc, cp)
        ctx.meta = (gates.dtype, gates.device)
        ctx.save_for_backward(gates, c)
        return Tensor._wrap(h, gates.dtype, gates.device), Tensor._wrap(c_new, gates.dtype, gates.device)

    @staticmethod
    def backward(ctx, dh, dc):
        if is_grad_enabled():   # create_graph: the gradient must itself be differentiable
            gates, c = ctx.saved_tensors
            from ..autograd import grad
            with enable_grad():
                outs = [(o, d) for o, d in zip(_cell_math(gates, c), (dh, dc)) if d is not None]
                want = [t for t in (gates, c) if t.requires_grad]
                got = iter(grad([o for o, _ in outs], want, [d for _, d in outs],
                                create_graph=True, allow_unused=True))
                return tuple(next(got) if t.requires_grad else None for t in (gates, c))
        s, tc, cp = ctx.arrays
        dtype, device = ctx.meta
        H = tc.shape[-1]
        if dh is None and dc is None:
            return None, None
        one = s.dtype.type(1)
        si, sf, tg, so = s[..., :H], s[..., H:2 * H], s[..., 2 * H:3 * H], s[..., 3 * H:]
        # d gates = (upstream factor per block) * (the activation's derivative), the latter
        # for all four blocks in one pass: s (1 - s) for the sigmoids, 1 - tanh^2 for g
        d_gates = one - s
        d_gates *= s
        np.multiply(tg, tg, out=d_gates[..., 2 * H:3 * H])
        np.subtract(one, d_gates[..., 2 * H:3 * H], out=d_gates[..., 2 * H:3 * H])
        up = np.empty_like(s)
        if dh is not None:
            d = dh._data
            dcn = tc * tc                                   # the total cotangent of c'
            np.subtract(one, dcn, out=dcn)
            dcn *= so
            dcn *= d
            if dc is not None:
                dcn += dc._data
            np.multiply(d, tc, out=up[..., 3 * H:])
        else:
            dcn = np.array(dc._data, dtype=s.dtype, order="C")
            up[..., 3 * H:] = 0
        np.multiply(dcn, tg, out=up[..., :H])
        np.multiply(dcn, cp, out=up[..., H:2 * H])
        np.multiply(dcn, si, out=up[..., 2 * H:3 * H])
        d_gates *= up
        dcn *= sf
        return Tensor._wrap(d_gates, dtype, device), Tensor._wrap(dcn, dtype, device)


_SCALES: dict = {}


def _half_scale(H: int, dtype) -> np.ndarray:
    """The tanh arguments' scale per gate column: 1/2 for the sigmoid blocks (i, f, o), 1
    for g (made once per size and dtype)."""
    key = (H, dtype)
    scale = _SCALES.get(key)
    if scale is None:
        scale = np.full(4 * H, 0.5, dtype=dtype)
        scale[2 * H:3 * H] = 1.0
        scale.flags.writeable = False
        _SCALES[key] = scale
    return scale


def lstm_cell_gates(gates, c) -> tuple:
    """(h', c') of one LSTM cell step from its gate pre-activations (PyTorch's order i, f,
    g, o) and its cell state: one autograd node eagerly on the CPU, tracejit ops otherwise
    (captured graphs fuse them)."""
    if (_reg.trace_state.tracer is None and gates.device.type == "cpu" and c.device.type == "cpu"
            and gates.dtype.is_floating_point and gates.dtype == c.dtype
            and tuple(gates.shape[:-1]) == tuple(c.shape[:-1]) and gates.shape[-1] == 4 * c.shape[-1]):
        return _LSTMCellGates.apply(gates, c)
    return _cell_math(gates, c)


class _LSTMCellStep(Function):
    """One LSTM cell step as one node: ``lstm_layer`` and ``lstm_layer_backward`` on a
    one-step sequence (feature-major views of the batch-major h and c: no copies), the
    input projection's gradients as two products, as the layer's."""

    @staticmethod
    def forward(ctx, x, h, c, w_ih, w_hh, b_ih, b_hh):
        ctx.set_materialize_grads(False)
        xa, H = x._data[None], w_hh.shape[1]
        b = _bias_sum(b_ih, b_hh, w_hh)
        Z = LSTM_LAYER.run(np, xa, w_ih._data, w_hh._data, b, h._data.T, c._data.T, reverse=False)
        ctx.Z, ctx.b = Z, b
        ctx.save_for_backward(x, h, c, w_ih, w_hh, b_ih, b_hh)
        wrap = lambda a: Tensor._wrap(a, x.dtype, x.device)  # noqa: E731
        return wrap(Z[0, :H].T), wrap(Z[0, H:2 * H].T)

    @staticmethod
    def backward(ctx, dh, dc):
        x, h, c, w_ih, w_hh, b_ih, b_hh = ctx.saved_tensors
        if is_grad_enabled():   # create_graph: differentiate the cell written with tracejit ops
            return _graph_grads(_lstm_step_ops, (x, h, c, w_ih, w_hh, b_ih, b_hh), (dh, dc))
        if dh is None and dc is None:
            return (None,) * 7
        N, H = h.shape[0], w_hh.shape[1]
        dt = ctx.Z.dtype
        zero = _zeros((H, N), dt)
        res = LSTM_LAYER_BACKWARD.run(np, _zeros((1, H, N), dt), zero if dh is None else dh._data.T,
                                      zero if dc is None else dc._data.T, x._data[None], w_ih._data,
                                      w_hh._data, ctx.b, h._data.T, c._data.T, ctx.Z, reverse=False)
        off = backward_parts(4, H, N, 2)
        G = res[off[4]:].reshape(N, 4 * H)
        need = ctx.needs_input_grad
        wrap = lambda a: Tensor._wrap(a, x.dtype, x.device)  # noqa: E731
        d_b = wrap(res[off[1]:off[2]])
        return (wrap(_matmul(np, G, w_ih._data)) if need[0] else None,
                wrap(res[off[2]:off[3]].reshape(H, N).T) if need[1] else None,
                wrap(res[off[3]:off[4]].reshape(H, N).T) if need[2] else None,
                wrap(_matmul(np, G.T, x._data)) if need[3] else None,
                wrap(res[off[0]:off[1]].reshape(4 * H, H)) if need[4] else None,
                d_b if b_ih is not None and need[5] else None,
                wrap(res[off[1]:off[2]].copy()) if b_hh is not None and need[6] else None)


class _GRUCellStep(Function):
    """One GRU cell step as one node: the input projection (one product), then
    ``gru_layer`` and ``gru_layer_backward`` on a one-step sequence."""

    @staticmethod
    def forward(ctx, x, h, w_ih, w_hh, b_ih, b_hh):
        ctx.set_materialize_grads(False)
        H = w_hh.shape[1]
        gi = _matmul(np, x._data, w_ih._data.T)
        if b_ih is not None:
            gi += b_ih._data
        b = np.zeros(3 * H, dtype=gi.dtype) if b_hh is None else b_hh._data
        Z = GRU_LAYER.run(np, gi[None], w_hh._data, b, h._data.T, reverse=False)
        ctx.arrays = (gi, b, Z)
        ctx.save_for_backward(x, h, w_ih, w_hh, b_ih, b_hh)
        return Tensor._wrap(Z[0, :H].T, x.dtype, x.device)

    @staticmethod
    def backward(ctx, dh):
        x, h, w_ih, w_hh, b_ih, b_hh = ctx.saved_tensors
        if is_grad_enabled():   # create_graph
            from .recurrent import gru_step
            from . import functional as F
            return _graph_grads(lambda x, h, w_ih, w_hh, b_ih, b_hh: (
                gru_step(F.linear(x, w_ih, b_ih), h, w_hh, b_hh),), (x, h, w_ih, w_hh, b_ih, b_hh), (dh,))
        if dh is None:
            return (None,) * 6
        gi, b, Z = ctx.arrays
        N, H = h.shape[0], w_hh.shape[1]
        res = GRU_LAYER_BACKWARD.run(np, _zeros((1, H, N), Z.dtype), dh._data.T, gi[None],
                                     w_hh._data, b, h._data.T, Z, reverse=False)
        off = backward_parts(3, H, N)
        G = res[off[3]:].reshape(N, 3 * H)
        need = ctx.needs_input_grad
        wrap = lambda a: Tensor._wrap(a, x.dtype, x.device)  # noqa: E731
        return (wrap(_matmul(np, G, w_ih._data)) if need[0] else None,
                wrap(res[off[2]:off[3]].reshape(H, N).T) if need[1] else None,
                wrap(_matmul(np, G.T, x._data)) if need[2] else None,
                wrap(res[off[0]:off[1]].reshape(3 * H, H)) if need[3] else None,
                wrap(G.sum(axis=0)) if b_ih is not None and need[4] else None,
                wrap(res[off[1]:off[2]]) if b_hh is not None and need[5] else None)


_ZEROS: dict = {}


def _zeros(shape: tuple, dtype) -> np.ndarray:
    """A read-only zero array (one per shape and dtype): the one-step layer primitives'
    cotangents that are zero, which they only read (a cell step called once per time step
    would otherwise allocate and clear them every call)."""
    key = (shape, dtype)
    z = _ZEROS.get(key)
    if z is None:
        if len(_ZEROS) > 64:
            _ZEROS.clear()
        z = np.zeros(shape, dtype=dtype)
        z.flags.writeable = False
        _ZEROS[key] = z
    return z


def _bias_sum(b_ih, b_hh, w_hh) -> np.ndarray:
    if b_ih is None and b_hh is None:
        return np.zeros(w_hh.shape[0], dtype=w_hh._data.dtype)
    if b_ih is None or b_hh is None:
        return (b_hh if b_ih is None else b_ih)._data
    return b_ih._data + b_hh._data


def _graph_grads(step, inputs: tuple, cotangents: tuple) -> tuple:
    """A cell step's gradients as a differentiable graph (create_graph): ``step(*inputs)``,
    the step written with tracejit ops, recomputed and differentiated."""
    from ..autograd import grad
    with enable_grad():
        outs = [(o, d) for o, d in zip(step(*inputs), cotangents) if d is not None]
        want = [t for t in inputs if t is not None and t.requires_grad]
        got = iter(grad([o for o, _ in outs], want, [d for _, d in outs], create_graph=True,
                        allow_unused=True))
        return tuple(next(got) if t is not None and t.requires_grad else None for t in inputs)


def _lstm_step_ops(x, h, c, w_ih, w_hh, b_ih, b_hh) -> tuple:
    from . import functional as F
    return _cell_math(F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh), c)


def _eager_cpu(x, *others) -> bool:
    """Whether a cell step runs as one node on the arrays: eagerly (no trace), CPU,
    float32/float64 operands of one dtype."""
    return (_reg.trace_state.tracer is None and x.device.type == "cpu"
            and x.dtype.name in ("float32", "float64")
            and all(t is None or (t.device.type == "cpu" and t.dtype == x.dtype) for t in others))


def lstm_cell_step(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """(h', c') of one LSTMCell step, x (N, I), h and c (N, H), as one autograd node
    running the LSTM layer's primitives (eagerly on the CPU, float32/float64), else None."""
    if not _eager_cpu(x, h, c, w_ih, w_hh, b_ih, b_hh):
        return None
    return _LSTMCellStep.apply(x, h, c, w_ih, w_hh, b_ih, b_hh)


def gru_cell_step(x, h, w_ih, w_hh, b_ih, b_hh):
    """h' of one GRUCell step, x (N, I), h (N, H), as one autograd node running the GRU
    layer's primitives (eagerly on the CPU, float32/float64), else None."""
    if not _eager_cpu(x, h, w_ih, w_hh, b_ih, b_hh):
        return None
    return _GRUCellStep.apply(x, h, w_ih, w_hh, b_ih, b_hh)
