"""Recurrent layers: RNN (tanh/relu), LSTM, GRU and their single-step cells, as PyTorch.

The input projection ``x @ W_ih.T + b_ih`` of a whole sequence is one matmul; only the
hidden projection runs per time step. The per-step math of each cell kind is one
function (`rnn_tanh_step`, `rnn_relu_step`, `lstm_step`, `gru_step`) taking that
precomputed input projection.

RNN, LSTM and GRU layers run each time loop inside one op (ops/rnn_layer.py,
ops/lstm_layer.py, ops/gru_layer.py: primitives with their own backward, eager and
compiled); the hidden weights' gradient is one GEMM over all time steps there. The cells
run the cell math on one product of [x | h] (RNNCell, LSTMCell: `_packed_proj`) or on the
input projection and `gru_step` (GRUCell).

Parameters, their names (``weight_ih_l0``, ``bias_hh_l1_reverse``, ...), their order,
their initialisation U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) and the gate order
(LSTM: i, f, g, o; GRU: r, z, n) are PyTorch's, so a PyTorch state_dict loads by name.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import ops as _ops
from ..errors import ShapeError
from ..ops import autocast as _autocast
from ..ops import registry as _reg
from . import functional as F
from . import init
from .layers import _factory, _positive_int
from .module import Module
from .parameter import Parameter
from ..ops.gru_layer import gru_cell, gru_layer_fm
from ..ops.lstm_layer import lstm_layer_fm
from ..ops.rnn_layer import rnn_cell, rnn_layer_fm
from ..ops.step_slices import chunk
from .recurrent_checks import RecurrentChecks
from .recurrent_grad import gru_cell_step, lstm_cell_gates, lstm_cell_step

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
           "rnn_tanh_step", "rnn_relu_step", "lstm_step", "gru_step"]


# ---------------------------------------------------------------- per-step cell math
# `gi` is the input projection x_t @ W_ih.T + b_ih for one step, shape (N, G*H).
def _hidden_proj(h, w_hh, b_hh):
    return F.linear(h, w_hh, b_hh)


def rnn_tanh_step(gi, h, w_hh, b_hh):
    """h' = tanh(gi + h @ W_hh.T + b_hh)."""
    return rnn_cell(gi + _hidden_proj(h, w_hh, b_hh), "tanh")


def rnn_relu_step(gi, h, w_hh, b_hh):
    """h' = relu(gi + h @ W_hh.T + b_hh)."""
    return rnn_cell(gi + _hidden_proj(h, w_hh, b_hh), "relu")


def lstm_step(gi, h, c, w_hh, b_hh):
    """(h', c') of one LSTM step; gates in PyTorch's order i, f, g, o (the cell math:
    ops/lstm_layer.py `lstm_cell`; eagerly one node, nn/recurrent_grad.py)."""
    return lstm_cell_gates(gi + _hidden_proj(h, w_hh, b_hh), c)


def gru_step(gi, h, w_hh, b_hh):
    """h' of one GRU step: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1-z)*n + z*h
    (the cell math: ops/gru_layer.py `gru_cell`)."""
    gh = _hidden_proj(h, w_hh, b_hh)
    return gru_cell(*chunk(gi, 3, -1), *chunk(gh, 3, -1), h)


def _packed_proj(x, h, w_ih, w_hh, b_ih, b_hh):
    """``x @ W_ih.T + b_ih + h @ W_hh.T + b_hh`` of one cell step as one product,
    ``[x | h] @ [W_ih | W_hh].T + (b_ih + b_hh)``: one GEMM forward and two backward where
    the two projections take two and four (a captured loop's CSE keeps one concatenation)."""
    return F.linear(_ops.cat([x, h], 1), _ops.cat([w_ih, w_hh], 1), _bias_sum(b_ih, b_hh))


def _bias_sum(b_ih, b_hh):
    return b_ih if b_hh is None else b_hh if b_ih is None else b_ih + b_hh


def _input_proj(x, w_ih, b_ih):
    """x_t @ W_ih.T + b_ih of every step of time-major x (L, N, H_in), as one GEMM."""
    L, N, h_in = x.shape
    return _ops.reshape(F.linear(_ops.reshape(x, (L * N, h_in)), w_ih, b_ih), (L, N, w_ih.shape[0]))


_STEPS = {"RNN_TANH": rnn_tanh_step, "RNN_RELU": rnn_relu_step, "LSTM": lstm_step, "GRU": gru_step}
_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _shape(t) -> tuple:
    return tuple(t.shape)


def _reset_uniform(m: Module) -> None:
    """PyTorch's default for recurrent layers and cells: every parameter
    U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
    bound = 1.0 / math.sqrt(m.hidden_size)
    for p in m.parameters():
        init.uniform_(p, -bound, bound)


def _elman_mode(layer: str, nonlinearity: str) -> str:
    """An Elman RNN's mode for `nonlinearity`, or PyTorch's ValueError naming `layer`."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{layer}: unknown nonlinearity {nonlinearity!r}; expected 'tanh' or 'relu'")
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


# ---------------------------------------------------------------- full-sequence layers
class RNNBase(RecurrentChecks, Module):
    """Shared constructor, parameters and the layer/direction loop of RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None):
        super().__init__()
        name = self._name()
        _positive_int("input_size", name, input_size)
        _positive_int("hidden_size", name, hidden_size)
        _positive_int("num_layers", name, num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the "
                             f"probability of an element being zeroed, got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError(f"{name}: proj_size should be a positive integer or zero to disable "
                             f"projections, got {proj_size!r}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size has to be smaller than hidden_size, got proj_size="
                             f"{proj_size}, hidden_size={hidden_size}")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", UserWarning, stacklevel=3)
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first = bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self.proj_size = proj_size
        kw = _factory(device, dtype)
        g, out_size = _GATES[mode] * hidden_size, proj_size or hidden_size
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else out_size * self._dirs
            for suffix in self._suffixes():
                setattr(self, f"weight_ih_l{layer}{suffix}", Parameter(_ops.empty(g, in_size, **kw)))
                setattr(self, f"weight_hh_l{layer}{suffix}", Parameter(_ops.empty(g, out_size, **kw)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{suffix}", Parameter(_ops.empty(g, **kw)))
                    setattr(self, f"bias_hh_l{layer}{suffix}", Parameter(_ops.empty(g, **kw)))
                if proj_size:
                    setattr(self, f"weight_hr_l{layer}{suffix}",
                            Parameter(_ops.empty(proj_size, hidden_size, **kw)))
        self.reset_parameters()

    def _name(self) -> str:
        return type(self).__name__

    @property
    def _dirs(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple:
        return ("", "_reverse") if self.bidirectional else ("",)

    reset_parameters = _reset_uniform

    def flatten_parameters(self) -> None:
        """PyTorch's packs cuDNN's weight buffer; tracejit's weights need no packing."""

    @property
    def _all_weights(self) -> list:
        """The parameter names of each layer and direction, in PyTorch's order."""
        kinds = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ()) \
            + (("weight_hr",) if self.proj_size else ())
        return [[f"{k}_l{layer}{suffix}" for k in kinds]
                for layer in range(self.num_layers) for suffix in self._suffixes()]

    @property
    def _flat_weights_names(self) -> list:
        return [n for names in self._all_weights for n in names]

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list:
        """Each layer and direction's parameters (weight_ih, weight_hh, biases, weight_hr)."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def _weights(self, layer: int, suffix: str) -> tuple:
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    # ---- checks -------------------------------------------------------------------------
    def _check_input(self, input) -> bool:
        """-> whether the input is batched; raises a ShapeError naming the layer otherwise."""
        name = self._name()
        if input.ndim not in (2, 3):
            raise ShapeError(f"{name}: expected a 2-D (unbatched) or 3-D (batched) input, got "
                             f"{input.ndim}-D input of shape {_shape(input)}")
        if input.shape[-1] != self.input_size:
            expected = ("(L, N, H_in)" if not self.batch_first else "(N, L, H_in)") if input.ndim == 3 \
                else "(L, H_in)"
            raise ShapeError(f"{name}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {input.shape[-1]} (input shape {_shape(input)}, "
                             f"expected {expected} with H_in={self.input_size})")
        if not input.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating point input, got {input.dtype.name}")
        return input.ndim == 3

    def _state_size(self, which: str) -> int:
        """The last dim of state `which`: h is proj_size wide where the LSTM projects it."""
        return self.proj_size if self.proj_size and which == "h_0" else self.hidden_size

    def _check_state(self, state, which: str, batch: int, batched: bool):
        size = self._state_size(which)
        expected = (self.num_layers * self._dirs, batch, size) if batched else \
            (self.num_layers * self._dirs, size)
        if _shape(state) != expected:
            raise ShapeError(f"{self._name()}: expected {which} of shape {expected}, got "
                             f"{_shape(state)}" + ("" if batched else " (the input is unbatched)"))
        return state if batched else _ops.unsqueeze(state, 1)

    def _initial_states(self, hx, batch: int, batched: bool, like) -> list:
        """-> a list (one per state: h, or h and c) of (num_layers*dirs, N, H) tensors."""
        names = ("h_0", "c_0") if self.mode == "LSTM" else ("h_0",)
        if hx is None:
            return [_ops.zeros(self.num_layers * self._dirs, batch, self._state_size(n),
                               dtype=like.dtype, device=like.device) for n in names]
        states = tuple(hx) if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(states) != 2):
            raise TypeError(f"{self._name()}: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        return [self._check_state(s, n, batch, batched) for s, n in zip(states, names)]

    # ---- forward ------------------------------------------------------------------------
    def forward(self, input, hx=None):
        from .utils.rnn import PackedSequence, run_packed
        if isinstance(input, PackedSequence):   # variable lengths: nn/utils/rnn.py
            return run_packed(self, input, hx)
        batched = self._check_input(input)
        if not batched:
            x = _ops.unsqueeze(input, 1)
        elif self.batch_first:
            x = _ops.transpose(input, 0, 1)
        else:
            x = input
        if x.shape[0] == 0:
            raise ShapeError(f"{self._name()}: the input sequence is empty (length 0, input shape "
                             f"{_shape(input)})")
        batch = x.shape[1]
        init_states = self._initial_states(hx, batch, batched, x)
        # the last layer of a one-direction batch_first LSTM/GRU keeps its output batch-major
        x, finals = self._run_layers(x, init_states, batched and self.batch_first and self._dirs == 1)
        if not batched:
            x = _ops.squeeze(x, 1)
            finals = [_ops.squeeze(f, 1) for f in finals]
        elif self.batch_first:
            x = _ops.transpose(x, 0, 1)
        return x, (tuple(finals) if self.mode == "LSTM" else finals[0])

    def _run_layers(self, x, init_states: list, batch_major: bool = False, batch_sizes=None) -> tuple:
        """`_layers` as PyTorch's CPU autocast runs them: an LSTM's layers (mkldnn_rnn_layer)
        and an Elman RNN's (its input products) in the autocast dtype, the weights cast
        with the input and states; a GRU in its input's dtype (a float32 one stays float32).
        The layers' own products are not cast again."""
        to = _autocast.current()
        if to is None:
            return self._layers(x, init_states, batch_major, batch_sizes)
        if self.mode == "GRU" and x.dtype is not to:
            to = None
        cast = (lambda t: t if t is None or t.dtype is to else _ops.cast(t, to)) if to is not None else None
        if cast is not None:
            x, init_states = cast(x), [cast(s) for s in init_states]
        prev = _autocast.set_state(None)
        try:
            return self._layers(x, init_states, batch_major, batch_sizes, cast)
        finally:
            _autocast.set_state(prev)

    def _layers(self, x, init_states: list, batch_major: bool = False, batch_sizes=None, cast=None) -> tuple:
        """Every layer and direction over time-major x (L, N, H_in) -> (output (L, N, H*dirs),
        the final states: a list of (num_layers*dirs, N, H) tensors). `batch_major`: the
        caller transposes the output to (N, L, H) (see `_run_direction`); `batch_sizes`: a
        packed batch's per-step sequence counts, its columns sorted longest first
        (nn/utils/rnn.py `run_packed`)."""
        step = _STEPS[self.mode]
        finals = [[] for _ in init_states]
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(self._suffixes()):
                k = layer * self._dirs + d
                state = tuple(s[k] for s in init_states)
                weights = self._weights(layer, suffix)
                w_hr = getattr(self, f"weight_hr_l{layer}{suffix}", None)
                if cast is not None:
                    weights, w_hr = tuple(cast(w) for w in weights), cast(w_hr)
                if self.proj_size:
                    out, state = _lstm_proj_layer(x, state, weights, w_hr, d == 1, batch_sizes)
                else:
                    out, state = _run_direction(step, x, state, weights, reverse=d == 1,
                                                batch_major=batch_major and layer == self.num_layers - 1,
                                                batch_sizes=batch_sizes)
                outs.append(out)
                for f, s in zip(finals, state):
                    f.append(s)
            x = outs[0] if len(outs) == 1 else _ops.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, [_ops.stack(f, 0) for f in finals]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


def _run_direction(step, x, state: tuple, weights: tuple, reverse: bool, batch_major: bool = False,
                   batch_sizes=None):
    """Run one layer in one direction over time-major x (L, N, H_in) -> (out (L, N, H), state).
    ``batch_major``: the caller will transpose out to (N, L, H), so the layers make that
    their memory order. Every layer kind runs its time loops inside one op each way; a
    packed batch (`batch_sizes`) too, its steps updating only the sequences that have them.
    A one-step LSTM or GRU sequence runs eagerly as the cells' one node, without the
    layer's shape ops around it."""
    if (batch_sizes is None and _reg.trace_state.tracer is None and x.shape[0] == 1
            and step in (lstm_step, gru_step)):
        out = _one_step(step, x, state, weights)
        if out is not None:
            return out
    if step is lstm_step:
        return _lstm_layer(x, state, weights, reverse, batch_major, batch_sizes)
    if step is gru_step:
        return _state_layer(gru_layer_fm, x, state, weights, reverse, batch_major, batch_sizes)
    nonlinearity = "tanh" if step is rnn_tanh_step else "relu"
    return _state_layer(rnn_layer_fm, x, state, weights, reverse, batch_major, batch_sizes, nonlinearity)


def _one_step(step, x, state: tuple, weights: tuple):
    """`_run_direction` of an LSTM or GRU over a one-step x (1, N, H_in) as one cell step
    -> (out (1, N, H), state), or None where the cell step does not run as one node."""
    x0 = _ops.squeeze(x, 0)
    if step is gru_step:
        w_ih, w_hh, b_ih, b_hh = weights
        h = gru_cell_step(x0, state[0], w_ih, w_hh, b_ih, b_hh)
        return None if h is None else (_ops.unsqueeze(h, 0), (h,))
    hc = lstm_cell_step(x0, *state, *weights)
    return None if hc is None else (_ops.unsqueeze(hc[0], 0), hc)


def _time_major_rows(out, batch_major: bool):
    """A layer's feature-major output (L, H, N) as (L, N, H) rows of H: contiguous, or for a
    batch_first output a (L, N, H) view of a contiguous (N, L, H), since the next GEMMs read
    rows of H. The (N, L, H) order is made in two copies, (L, N, H) first, which reads each
    step's block once (3.3 ms against 1.3 for the LM step)."""
    out = _ops.contiguous(_ops.permute(out, (0, 2, 1)))
    if batch_major:
        out = _ops.transpose(_ops.contiguous(_ops.transpose(out, 0, 1)), 0, 1)
    return out


def _lstm_layer(x, state: tuple, weights: tuple, reverse: bool, batch_major: bool = False, batch_sizes=None):
    """`_run_direction` of an LSTM, eager or captured: the whole time loop as one op
    forward and one backward (ops/lstm_layer.py), feature-major (contiguous gate blocks and
    the faster GEMM orientation for small batches); the input projection is part of each
    step's packed product inside the loop, the biases added at each step."""
    w_ih, w_hh, b_ih, b_hh = weights
    h0, c0 = (_ops.transpose(s, 0, 1) for s in state)
    out, h, c = lstm_layer_fm(x, w_ih, w_hh, h0, c0, reverse, _bias_sum(b_ih, b_hh), batch_sizes)
    out = _time_major_rows(out, batch_major)
    return out, (_ops.transpose(h, 0, 1), _ops.transpose(c, 0, 1))


def _state_layer(layer_fm, x, state: tuple, weights: tuple, reverse: bool, batch_major: bool,
                 batch_sizes=None, *options):
    """`_run_direction` of a GRU or an Elman RNN (`layer_fm`: ops/gru_layer.py's or
    ops/rnn_layer.py's), eager or captured: the whole time loop as one op forward and one
    backward, feature-major as `_lstm_layer`; the input projection with b_ih is one GEMM
    over the L*N rows."""
    w_ih, w_hh, b_ih, b_hh = weights
    gi, h0 = _input_proj(x, w_ih, b_ih), _ops.transpose(state[0], 0, 1)
    out, h = layer_fm(gi, w_hh, h0, reverse, b_hh, *options, batch_sizes=batch_sizes)
    return _time_major_rows(out, batch_major), (_ops.transpose(h, 0, 1),)


def _lstm_proj_layer(x, state: tuple, weights: tuple, w_hr, reverse: bool, batch_sizes=None):
    """`_run_direction` of an LSTM with projections (``proj_size``): h_t = W_hr (o_t *
    tanh(c_t)), the projected h feeding the next step's W_hh. The layer op's loop has no
    projection, so this runs the cell step by step (`lstm_cell_gates`: one node a step
    eagerly; captured, the loop unrolls). With ``batch_sizes`` (a packed batch, longest
    first) step t updates the first batch_sizes[t] columns and holds the others' states.
    -> (out (L, N, P), (h (N, P), c (N, H)))."""
    w_ih, w_hh, b_ih, b_hh = weights
    L, N = x.shape[:2]
    gi = _input_proj(x, w_ih, b_ih)
    h, c = state
    outs = [None] * L
    for t in (range(L - 1, -1, -1) if reverse else range(L)):
        h_new, c_new = lstm_cell_gates(gi[t] + F.linear(h, w_hh, b_hh), c)
        h_new = F.linear(h_new, w_hr)
        if batch_sizes is not None and batch_sizes[t] < N:
            keep = _ops.tensor((np.arange(N) < batch_sizes[t])[:, None], device=x.device)
            h_new, c_new = _ops.where(keep, h_new, h), _ops.where(keep, c_new, c)
        h, c = h_new, c_new
        outs[t] = h
    return _ops.stack(outs, 0), (h, c)


class RNN(RNNBase):
    """Elman RNN: h_t = tanh or relu(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None, dtype=None):
        super().__init__(_elman_mode("RNN", nonlinearity), input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    """LSTM; ``forward(input, (h_0, c_0))`` returns ``output, (h_n, c_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """GRU; ``forward(input, h_0)`` returns ``output, h_n``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)


# ---------------------------------------------------------------- single-step cells
class _CellBase(Module):
    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool, device, dtype):
        super().__init__()
        name = type(self).__name__
        _positive_int("input_size", name, input_size)
        _positive_int("hidden_size", name, hidden_size)
        self.mode = mode
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kw = _factory(device, dtype)
        g = _GATES[mode] * hidden_size
        self.weight_ih = Parameter(_ops.empty(g, input_size, **kw))
        self.weight_hh = Parameter(_ops.empty(g, hidden_size, **kw))
        self.bias_ih = Parameter(_ops.empty(g, **kw)) if bias else None
        self.bias_hh = Parameter(_ops.empty(g, **kw)) if bias else None
        self.reset_parameters()

    reset_parameters = _reset_uniform

    def _check(self, input, states: tuple, names: tuple) -> tuple:
        """-> (batched, states as (N, H) tensors, zeros where None)."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ShapeError(f"{name}: expected a 1-D (unbatched) or 2-D (batched) input, got "
                             f"{input.ndim}-D input of shape {_shape(input)}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has {input.shape[-1]} features (shape {_shape(input)}), "
                             f"expected input_size={self.input_size}")
        batched = input.ndim == 2
        expected = (input.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        out = []
        for s, n in zip(states, names):
            if s is None:
                s = _ops.zeros(*expected, dtype=input.dtype, device=input.device)
            elif _shape(s) != expected:
                raise ShapeError(f"{name}: expected {n} of shape {expected}, got {_shape(s)}")
            out.append(s if batched else _ops.unsqueeze(s, 0))
        return batched, tuple(out)

    def _step(self, input, states: tuple, names: tuple) -> tuple:
        batched, states = self._check(input, states, names)
        x = input if batched else _ops.unsqueeze(input, 0)
        if self.mode == "GRU":   # its hidden projection is gated apart (r * (W_hn h + b_hn))
            out = gru_cell_step(x, *states, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
            if out is None:
                gi = F.linear(x, self.weight_ih, self.bias_ih)
                out = gru_step(gi, *states, self.weight_hh, self.bias_hh)
        elif self.mode == "LSTM" and _reg.trace_state.tracer is None:
            # eagerly the layer's primitives on a sequence of one step: its one definition
            # of the cell (kernel and numpy form), the input projection in its product
            w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
            out = lstm_cell_step(x, *states, *w)
            if out is None:     # (the layer over a one-step sequence)
                out = _lstm_layer(_ops.unsqueeze(x, 0), states, w, False)[1]
        else:
            gates = _packed_proj(x, states[0], self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
            out = (lstm_cell_gates(gates, states[1]) if self.mode == "LSTM"
                   else rnn_cell(gates, "tanh" if self.mode == "RNN_TANH" else "relu"))
        out = out if isinstance(out, tuple) else (out,)
        return tuple(o if batched else _ops.squeeze(o, 0) for o in out)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        return s if self.bias else s + ", bias=False"


class RNNCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        super().__init__(_elman_mode("RNNCell", nonlinearity), input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        return self._step(input, (hx,), ("hx",))[0]


class LSTMCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        if hx is None:
            hx = (None, None)
        elif not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError(f"LSTMCell: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        return self._step(input, tuple(hx), ("h_0", "c_0"))


class GRUCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        return self._step(input, (hx,), ("hx",))[0]
