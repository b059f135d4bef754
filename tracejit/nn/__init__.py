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
