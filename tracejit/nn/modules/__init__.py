"""``tracejit.nn.modules``: the layers under the submodule paths of ``torch.nn.modules``
(``from torch.nn.modules.loss import _Loss``, ``torch.nn.modules.utils._pair``). Every name
is the ``tracejit.nn`` class itself; these modules only hold the paths."""
from __future__ import annotations

from ...nn import *  # noqa: F401,F403
from ..module import Module  # noqa: F401
from . import (activation, adaptive, batchnorm, channelshuffle, container, conv, distance, dropout,
               flatten, fold, instancenorm, lazy, linear, loss, module, normalization, padding,
               pixelshuffle, pooling, rnn, sparse, transformer, upsampling, utils)  # noqa: F401
