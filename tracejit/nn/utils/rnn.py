"""Packed sequences (``torch.nn.utils.rnn``): variable-length batches for the recurrent
layers.

A `PackedSequence` holds the steps of a batch of sequences sorted longest first, time
step by time step (``data``: the rows of every sequence still running at each step;
``batch_sizes``: how many at each step), plus the permutation to and from the caller's
batch order. `pack_padded_sequence` / `pad_packed_sequence` convert from and to padded
(T, B, *) tensors with gathers (so gradients flow through them), `pad_sequence` pads a
list of sequences.

RNN, LSTM and GRU accept a PackedSequence (`run_packed`): one recurrence per layer and
direction whose step t updates the ``batch_sizes[t]`` sequences that have that step, so
the final states are those of each sequence's own last step -- in both directions of a
bidirectional layer -- with the hidden states in the caller's batch order, as in PyTorch.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ... import dtypes as _dt
from ... import ops as _ops
from ...errors import ArgumentError, ShapeError
from ...tensor import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "pack_sequence", "unpad_sequence", "unpack_sequence", "invert_permutation"]


class PackedSequence(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Optional[Tensor] = None
    unsorted_indices: Optional[Tensor] = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        return self._replace(data=self.data.to(*args, **kwargs))

    def cpu(self) -> "PackedSequence":
        return self.to("cpu")

    def cuda(self, *args, **kwargs) -> "PackedSequence":
        return self._replace(data=self.data.cuda(*args, **kwargs))

    def float(self) -> "PackedSequence":
        return self._replace(data=self.data.float())

    def double(self) -> "PackedSequence":
        return self._replace(data=self.data.double())

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return False

    def pin_memory(self) -> "PackedSequence":
        return self._replace(data=self.data.pin_memory())


def _cast_method(name: str):
    def cast(self) -> PackedSequence:
        return self._replace(data=getattr(self.data, name)())
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = f"The packed data as ``data.{name}()``; the sizes and indices as they are."
    return cast


for _name in ("half", "long", "int", "short", "char", "byte"):
    setattr(PackedSequence, _name, _cast_method(_name))
del _name


def invert_permutation(permutation):
    if permutation is None:
        return None
    p = permutation.numpy().astype(np.int64)
    inv = np.empty_like(p)
    inv[p] = np.arange(p.size)
    return _ops.tensor(inv, dtype=_dt.int64)


def _lengths_list(lengths) -> np.ndarray:
    if isinstance(lengths, Tensor):
        if lengths.ndim != 1:
            raise ValueError(f"pack_padded_sequence: lengths must be 1-D, got shape {tuple(lengths.shape)}")
        if lengths._data is None:   # (a tracer: a graph break, named here rather than as .numpy())
            from ...errors import TraceError
            raise TraceError("pack_padded_sequence: the values of a lengths tensor set the packed "
                             "shapes, which a graph cannot follow; pass the lengths as a list of ints "
                             "(lengths.tolist() outside) for a graph per list")
        return lengths.numpy().astype(np.int64)
    return np.asarray(list(lengths), dtype=np.int64)


def _time_major_layout(lengths_sorted: np.ndarray):
    """(batch_sizes, rows): rows[k] = (t, j) of packed row k, j in sorted batch order."""
    t_max = int(lengths_sorted[0]) if lengths_sorted.size else 0
    batch_sizes = np.array([(lengths_sorted > t).sum() for t in range(t_max)], dtype=np.int64)
    rows = [(t, j) for t in range(t_max) for j in range(batch_sizes[t])]
    return batch_sizes, rows


def pack_padded_sequence(input, lengths, batch_first: bool = False, enforce_sorted: bool = True):
    lens = _lengths_list(lengths)
    if lens.size != input.shape[0 if batch_first else 1]:
        raise ValueError(f"pack_padded_sequence: {lens.size} lengths for a batch of "
                         f"{input.shape[0 if batch_first else 1]} sequences")
    if lens.size and lens.min() <= 0:
        raise RuntimeError("pack_padded_sequence: Length of all samples has to be greater than 0, but "
                           "found an element in 'lengths' that is <= 0")
    if enforce_sorted:
        if np.any(np.diff(lens) > 0):
            raise RuntimeError("pack_padded_sequence: `lengths` array must be sorted in decreasing order "
                               "when `enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                               "pack_padded_sequence and/or pack_sequence to sidestep this requirement "
                               "if you do not need ONNX exportability.")
        order = np.arange(lens.size)
        sorted_indices = unsorted_indices = None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_indices = _ops.tensor(order, dtype=_dt.int64)
        unsorted_indices = invert_permutation(sorted_indices)
    x = _ops.transpose(input, 0, 1) if batch_first else input
    if x.shape[0] < int(lens.max()):
        raise ValueError(f"pack_padded_sequence: a length of {int(lens.max())} exceeds the {x.shape[0]} "
                         f"time steps of the input")
    batch_sizes, rows = _time_major_layout(lens[order])
    t_idx = _ops.tensor(np.array([r[0] for r in rows], dtype=np.int64))
    b_idx = _ops.tensor(np.array([order[r[1]] for r in rows], dtype=np.int64))
    data = _ops.getitem(x, (t_idx, b_idx))
    return PackedSequence(data, _ops.tensor(batch_sizes, dtype=_dt.int64), sorted_indices, unsorted_indices)


def _packed_lengths(batch_sizes: np.ndarray) -> np.ndarray:
    b = int(batch_sizes[0]) if batch_sizes.size else 0
    return np.array([(batch_sizes > j).sum() for j in range(b)], dtype=np.int64)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length=None):
    data, bs = sequence.data, sequence.batch_sizes.numpy().astype(np.int64)
    lens_sorted = _packed_lengths(bs)
    t_max = bs.size
    if total_length is not None:
        if total_length < t_max:
            raise ValueError(f"pad_packed_sequence: expected total_length to be at least the length of "
                             f"the longest sequence ({t_max}), got {total_length}")
        t_max = total_length
    b = lens_sorted.size
    _, rows = _time_major_layout(lens_sorted)
    # padded (T, B) position -> packed row, or the padding row appended at the end
    index = np.full((t_max, b), len(rows), dtype=np.int64)
    for k, (t, j) in enumerate(rows):
        index[t, j] = k
    pad_row = _ops.full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    table = _ops.cat([data, pad_row], 0)
    padded = _ops.getitem(table, _ops.tensor(index.reshape(-1)))
    padded = _ops.reshape(padded, (t_max, b) + tuple(data.shape[1:]))
    lengths = lens_sorted
    if sequence.unsorted_indices is not None:
        padded = _ops.getitem(padded, (slice(None), sequence.unsorted_indices))
        lengths = lens_sorted[sequence.unsorted_indices.numpy()]
    if batch_first:
        padded = _ops.transpose(padded, 0, 1)
    return padded, _ops.tensor(lengths, dtype=_dt.int64)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right"):
    """Stack sequences of shapes (L_i, *) into (max L, B, *) (or (B, max L, *)), padded."""
    if padding_side not in ("right", "left"):
        raise ArgumentError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    seqs = list(sequences)
    if not seqs:
        raise ValueError("pad_sequence: received an empty list of sequences")
    t_max = max(s.shape[0] for s in seqs)
    rows = []
    for s in seqs:
        extra = t_max - s.shape[0]
        if extra:
            fill = _ops.full((extra,) + tuple(s.shape[1:]), padding_value, dtype=s.dtype, device=s.device)
            s = _ops.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        rows.append(s)
    return _ops.stack(rows, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True):
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first: bool = False):
    """The sequences of a padded batch: of sequence i the steps t < lengths[i] (a tensor of
    lengths selects as PyTorch's mask ``arange(T) < lengths[i]`` does; a list slices)."""
    x = padded_sequences if batch_first else _ops.transpose(padded_sequences, 0, 1)
    if not isinstance(lengths, Tensor):
        return [x[i, :int(n)] for i, n in enumerate(_lengths_list(lengths))]
    steps = _ops.arange(x.shape[1], device=lengths.device)
    return [seq[steps < n] for seq, n in zip(x.unbind(0), lengths.unbind(0))]


def unpack_sequence(packed_sequences: PackedSequence):
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def _packed_positions(batch_sizes: np.ndarray) -> np.ndarray:
    """The position t * B + j in the padded time-major (T, B) batch (its columns the
    sequences sorted longest first) of each packed row, in the packed order."""
    b = int(batch_sizes[0])
    return np.concatenate([np.arange(t * b, t * b + n) for t, n in enumerate(batch_sizes.tolist())])


def run_packed(module, packed: PackedSequence, hx=None):
    """RNN/LSTM/GRU over a PackedSequence: (PackedSequence, h_n) or (PackedSequence,
    (h_n, c_n)), the states in the caller's batch order, as PyTorch.

    One recurrence per layer and direction over the whole batch, as PyTorch's packed
    layers: the packed rows are laid out time-major (T, B) with the sequences sorted
    longest first (one scatter), and each layer's loop takes ``batch_sizes``, so its step t
    updates the batch_sizes[t] sequences that have a step t and holds the others' states
    (the reverse direction thus starts each sequence at its own last step). The output's
    packed rows are gathered back from the last layer's (T, B) result."""
    data = packed.data
    if data.ndim != 2 or data.shape[-1] != module.input_size:
        raise ShapeError(f"{module._name()}: a packed sequence's data should be (rows, input_size="
                         f"{module.input_size}), got shape {tuple(data.shape)}")
    if not data.dtype.is_floating_point:
        raise TypeError(f"{module._name()}: expected a floating point input, got {data.dtype.name}")
    bs = packed.batch_sizes.numpy().astype(np.int64)
    T, B = int(bs.size), int(bs[0])
    # the packed rows put into zeros (distinct rows: the gradient is their gather)
    flat = _ops.tensor(_packed_positions(bs))
    zeros = _ops.zeros((T * B, data.shape[1]), dtype=data.dtype, device=data.device)
    x = _ops.reshape(_ops.index_put(zeros, (flat,), data), (T, B, data.shape[1]))
    lstm = module.mode == "LSTM"
    if hx is not None and packed.sorted_indices is not None:   # to the packed (sorted) order
        hx = tuple(_ops.getitem(s, (slice(None), packed.sorted_indices)) for s in hx) if lstm \
            and isinstance(hx, (tuple, list)) else _ops.getitem(hx, (slice(None), packed.sorted_indices))
    states = module._initial_states(hx, B, True, x)
    y, finals = module._run_layers(x, states, batch_sizes=tuple(bs.tolist()))
    out = _ops.getitem(_ops.reshape(y, (T * B, y.shape[-1])), flat)
    if packed.unsorted_indices is not None:                     # back to the caller's order
        finals = [_ops.getitem(f, (slice(None), packed.unsorted_indices)) for f in finals]
    result = PackedSequence(out, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices)
    return result, (tuple(finals) if lstm else finals[0])
