"""``tracejit.nn``: modules, parameters, layers, losses, initialisers (like ``torch.nn``)."""
from __future__ import annotations

from . import functional, init, utils  # noqa: F401
from . import parallel  # noqa: F401
from .containers import ModuleDict, ModuleList, ParameterList, Sequential
from .layers import (GELU, AvgPool2d, Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm,
                     LeakyReLU, Linear, LogSoftmax, MaxPool2d, ReLU, SiLU, Sigmoid, Softmax, Softplus,
                     Tanh)
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .module import Module, RemovableHandle
from .parameter import Parameter
from .activation import CELU, ELU, SELU, Hardsigmoid, Hardswish, Hardtanh, Mish, PReLU, ReLU6  # noqa: E402
from .loss_extra import (CosineEmbeddingLoss, CosineSimilarity, HingeEmbeddingLoss, HuberLoss,  # noqa: E402
                         KLDivLoss, MarginRankingLoss, PairwiseDistance, SmoothL1Loss, TripletMarginLoss)
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm1d, InstanceNorm2d  # noqa: E402
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: E402
from .conv import Conv1d, ConvTranspose2d
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, Dropout2d, Upsample
from .transformer import (MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer,
                          TransformerEncoder, TransformerEncoderLayer)

__all__ = ["Module", "Parameter", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict",
           "ParameterList", "Identity", "Linear", "Conv2d", "Embedding", "LayerNorm", "Dropout",
           "MaxPool2d", "AvgPool2d", "Flatten", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "LeakyReLU",
           "Softplus", "Softmax", "LogSoftmax", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss",
           "BCELoss", "BCEWithLogitsLoss", "functional", "init", "utils"]
__all__ += ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]
__all__ += ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d"]
__all__ += ["ELU", "SELU", "CELU", "Mish", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "PReLU",
            "SmoothL1Loss", "HuberLoss", "KLDivLoss", "MarginRankingLoss", "TripletMarginLoss",
            "HingeEmbeddingLoss", "CosineEmbeddingLoss", "CosineSimilarity", "PairwiseDistance"]
__all__ += ["Conv1d", "ConvTranspose2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Dropout2d", "Upsample",
            "MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
            "TransformerDecoder", "Transformer"]

from .activation_more import *  # noqa: E402,F401,F403
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: E402,F401
from .activation_more import __all__ as _activation_more  # noqa: E402
from .containers import Container, ParameterDict  # noqa: E402,F401
from .conv_nd import *  # noqa: E402,F401,F403
from .conv_nd import __all__ as _conv_nd  # noqa: E402
from .dropout import *  # noqa: E402,F401,F403
from .dropout import __all__ as _dropout  # noqa: E402
from .lazy import *  # noqa: E402,F401,F403
from .lazy import __all__ as _lazy  # noqa: E402
from .loss_more import *  # noqa: E402,F401,F403
from .loss_more import __all__ as _loss_more  # noqa: E402
from .normalization_more import *  # noqa: E402,F401,F403
from .normalization_more import __all__ as _norm_more  # noqa: E402
from .padding import *  # noqa: E402,F401,F403
from .padding import __all__ as _padding  # noqa: E402
from .parallel import DataParallel  # noqa: E402,F401
from .parameter import Buffer, UninitializedBuffer, UninitializedParameter  # noqa: E402,F401
from .pooling_nd import *  # noqa: E402,F401,F403
from .pooling_nd import __all__ as _pooling_nd  # noqa: E402
from .recurrent import RNNBase, _CellBase as RNNCellBase  # noqa: E402,F401
from .reshaping import *  # noqa: E402,F401,F403
from .reshaping import __all__ as _reshaping  # noqa: E402
from .sparse_bilinear import Bilinear, EmbeddingBag  # noqa: E402,F401
from . import modules  # noqa: E402,F401

__all__ += (_activation_more + _conv_nd + _dropout + _lazy + _loss_more + _norm_more + _padding
            + _pooling_nd + _reshaping
            + ["Container", "ParameterDict", "DataParallel", "Buffer", "UninitializedBuffer",
               "UninitializedParameter", "RNNBase", "RNNCellBase", "Bilinear", "EmbeddingBag",
               "AdaptiveLogSoftmaxWithLoss"])
