"""PyTorch's public checking helpers of ``RNNBase`` (``check_input``, ``check_forward_args``,
``get_expected_hidden_size``, ``permute_hidden``, ...), which subclasses of ``nn.LSTM`` and
``nn.GRU`` that write their own ``forward`` call. The layers' own forward checks with the
shape errors of recurrent.py; these keep PyTorch's messages and signatures."""
from __future__ import annotations

from ..tensor import Tensor

__all__ = ["RecurrentChecks"]


class RecurrentChecks:
    """Mixed into RNNBase: reads ``mode``, ``input_size``, ``hidden_size``, ``proj_size``,
    ``num_layers``, ``bidirectional``, ``batch_first`` and the layer-0 weight."""

    def check_input(self, input: Tensor, batch_sizes) -> None:
        w = self.weight_ih_l0.dtype
        if input.dtype != w:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({w}). Convert "
                             f"input: input.to({w}), or convert model: model.to({input.dtype})")
        expected = 2 if batch_sizes is not None else 3
        if input.dim() != expected:
            raise RuntimeError(f"input must have {expected} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.size(-1)}")

    def _expected_state(self, input: Tensor, batch_sizes, size: int) -> tuple:
        if batch_sizes is not None:
            batch = int(batch_sizes[0])
        else:
            batch = input.size(0) if self.batch_first else input.size(1)
        return (self.num_layers * (2 if self.bidirectional else 1), batch, size)

    def get_expected_hidden_size(self, input: Tensor, batch_sizes) -> tuple:
        return self._expected_state(input, batch_sizes, self.proj_size or self.hidden_size)

    def get_expected_cell_size(self, input: Tensor, batch_sizes) -> tuple:
        return self._expected_state(input, batch_sizes, self.hidden_size)

    def check_hidden_size(self, hx: Tensor, expected_hidden_size: tuple,
                          msg: str = "Expected hidden size {}, got {}") -> None:
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(tuple(expected_hidden_size), list(hx.size())))

    def check_forward_args(self, input: Tensor, hidden, batch_sizes) -> None:
        self.check_input(input, batch_sizes)
        if self.mode != "LSTM":
            self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))
            return
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def permute_hidden(self, hx, permutation):
        """`hx` (a tensor, or the LSTM's pair) with its batch dim put in `permutation`'s order."""
        if permutation is None:
            return hx
        if self.mode == "LSTM":
            return tuple(h.index_select(1, permutation) for h in hx)
        return hx.index_select(1, permutation)
