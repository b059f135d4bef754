"""``tracejit.nn.modules.rnn``: where ``torch.nn.modules.rnn`` keeps these layers."""
from __future__ import annotations

from ...nn import (GRU, GRUCell, LSTM, LSTMCell, RNN, RNNBase, RNNCell, RNNCellBase)  # noqa: F401

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]
