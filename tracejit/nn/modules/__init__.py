"""``tracejit.nn.modules``: the layers under the submodule paths of ``torch.nn.modules``
(``from torch.nn.modules.loss import _Loss``, ``torch.nn.modules.utils._pair``). Every name
is the ``tracejit.nn`` class itself: the submodules other than ``utils`` and ``linear`` only
hold paths, so they are made here from a table rather than kept as files."""
from __future__ import annotations

import importlib
import types

from ... import nn as _nn
from ..._path_modules import path_module
from ...nn import *  # noqa: F401,F403
from ..module import Module  # noqa: F401
from . import linear, utils  # noqa: F401

# submodule -> the names it holds: tracejit.nn's, or ``module:name`` from tracejit.nn.<module>
_PATHS = {
    "activation": "CELU ELU GELU GLU Hardshrink Hardsigmoid Hardswish Hardtanh LeakyReLU "
                  "LogSigmoid LogSoftmax Mish MultiheadAttention PReLU RReLU ReLU ReLU6 SELU "
                  "SiLU Sigmoid Softmax Softmax2d Softmin Softplus Softshrink Softsign Tanh "
                  "Tanhshrink Threshold",
    "adaptive": "AdaptiveLogSoftmaxWithLoss",
    "batchnorm": "BatchNorm1d BatchNorm2d BatchNorm3d LazyBatchNorm1d LazyBatchNorm2d "
                 "LazyBatchNorm3d SyncBatchNorm normalization:_BatchNorm "
                 "normalization:_NormBase",
    "channelshuffle": "ChannelShuffle",
    "container": "Container ModuleDict ModuleList ParameterDict ParameterList Sequential",
    "conv": "Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d LazyConv1d "
            "LazyConv2d LazyConv3d LazyConvTranspose1d LazyConvTranspose2d LazyConvTranspose3d "
            "layers:_ConvNd conv:_ConvTransposeNd",
    "distance": "CosineSimilarity PairwiseDistance",
    "dropout": "AlphaDropout Dropout Dropout1d Dropout2d Dropout3d FeatureAlphaDropout "
               "dropout:_DropoutNd",
    "flatten": "Flatten Unflatten",
    "fold": "Fold Unfold",
    "instancenorm": "InstanceNorm1d InstanceNorm2d InstanceNorm3d LazyInstanceNorm1d "
                    "LazyInstanceNorm2d LazyInstanceNorm3d normalization:_InstanceNorm",
    "lazy": "LazyModuleMixin",
    "loss": "BCELoss BCEWithLogitsLoss CTCLoss CosineEmbeddingLoss CrossEntropyLoss "
            "GaussianNLLLoss HingeEmbeddingLoss HuberLoss KLDivLoss L1Loss MSELoss "
            "MarginRankingLoss MultiLabelMarginLoss MultiLabelSoftMarginLoss MultiMarginLoss "
            "NLLLoss NLLLoss2d PoissonNLLLoss SmoothL1Loss SoftMarginLoss TripletMarginLoss "
            "TripletMarginWithDistanceLoss loss:_Loss loss:_WeightedLoss",
    "module": "Module module_hooks:register_module_forward_pre_hook module_hooks:register_module_forward_hook "
              "module_hooks:register_module_full_backward_pre_hook module_hooks:register_module_full_backward_hook "
              "module_hooks:register_module_backward_hook",
    "normalization": "CrossMapLRN2d GroupNorm LayerNorm LocalResponseNorm RMSNorm",
    "padding": "CircularPad1d CircularPad2d CircularPad3d ConstantPad1d ConstantPad2d "
               "ConstantPad3d ReflectionPad1d ReflectionPad2d ReflectionPad3d ReplicationPad1d "
               "ReplicationPad2d ReplicationPad3d ZeroPad1d ZeroPad2d ZeroPad3d",
    "pixelshuffle": "PixelShuffle PixelUnshuffle",
    "pooling": "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d "
               "AdaptiveMaxPool2d AdaptiveMaxPool3d AvgPool1d AvgPool2d AvgPool3d LPPool1d "
               "LPPool2d LPPool3d MaxPool1d MaxPool2d MaxPool3d MaxUnpool1d MaxUnpool2d "
               "MaxUnpool3d pooling_nd:_MaxPoolNd",
    "rnn": "GRU GRUCell LSTM LSTMCell RNN RNNBase RNNCell RNNCellBase",
    "sparse": "Embedding EmbeddingBag",
    "transformer": "Transformer TransformerDecoder TransformerDecoderLayer TransformerEncoder "
                   "TransformerEncoderLayer",
    "upsampling": "Upsample UpsamplingBilinear2d UpsamplingNearest2d",
}


def _path_module(sub: str, names: str) -> types.ModuleType:
    name = f"{__name__}.{sub}"
    attrs = {}
    for entry in names.split():
        src, _, attr = entry.rpartition(":")
        attrs[attr] = getattr(importlib.import_module(f"{_nn.__name__}.{src}") if src else _nn, attr)
    return path_module(name, f"``{name}``: where ``torch.nn.modules.{sub}`` keeps these layers.", attrs)


for _sub, _names in _PATHS.items():
    globals()[_sub] = _path_module(_sub, _names)
del _sub, _names
