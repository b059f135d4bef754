"""``tracejit.nn``: modules, parameters, layers, losses, initialisers (like ``torch.nn``)."""
from __future__ import annotations

from . import attention, functional, init, utils  # noqa: F401
from . import (containers, layers, loss, module, parameter, activation, loss_extra, normalization,  # noqa: I001
               recurrent, conv, pooling, transformer, activation_more, adaptive, conv_nd, dropout, lazy,
               loss_more, normalization_more, padding, parallel, pooling_nd, reshaping, sparse_bilinear)
from .containers import Container, ParameterDict
from .parallel import DataParallel
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, _CellBase as RNNCellBase

__all__ = ["functional", "init", "utils", "Container", "ParameterDict", "DataParallel", "RNN", "LSTM",
           "GRU", "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNNCellBase"]
# every public name of these modules (their __all__) is tracejit.nn's
for _m in (containers, layers, loss, module, parameter, activation, loss_extra, normalization, conv,
           pooling, transformer, activation_more, adaptive, conv_nd, dropout, lazy, loss_more,
           normalization_more, padding, pooling_nd, reshaping, sparse_bilinear):
    globals().update((name, getattr(_m, name)) for name in _m.__all__)
    __all__ += _m.__all__
del _m

from . import modules  # noqa: E402,F401
