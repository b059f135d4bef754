"""``tracejit.nn.modules.activation``: where ``torch.nn.modules.activation`` keeps these layers."""
from __future__ import annotations

from ...nn import (CELU, ELU, GELU, GLU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh,
                   LeakyReLU, LogSigmoid, LogSoftmax, Mish, MultiheadAttention, PReLU, RReLU,
                   ReLU, ReLU6, SELU, SiLU, Sigmoid, Softmax, Softmax2d, Softmin, Softplus,
                   Softshrink, Softsign, Tanh, Tanhshrink, Threshold)  # noqa: F401

__all__ = ["CELU", "ELU", "GELU", "GLU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSigmoid", "LogSoftmax", "Mish", "MultiheadAttention", "PReLU", "RReLU", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softmax", "Softmax2d", "Softmin", "Softplus", "Softshrink", "Softsign", "Tanh", "Tanhshrink", "Threshold"]
