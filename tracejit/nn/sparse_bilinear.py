"""EmbeddingBag (reduced bags of embedding rows) and Bilinear (x1 A x2 + b), with PyTorch's
parameter shapes, state_dict keys and initialisation."""
from __future__ import annotations

import math

from ..ops import empty
from ..ops.embedding_bag import embedding_bag
from ..ops.products import bilinear
from . import init
from .layers import Embedding, _factory, _positive_int
from .module import Module
from .parameter import Parameter

__all__ = ["EmbeddingBag", "Bilinear"]


class EmbeddingBag(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight=None, include_last_offset: bool = False, padding_idx=None, device=None,
                 dtype=None):
        super().__init__()
        num_embeddings = _positive_int("num_embeddings", "EmbeddingBag", num_embeddings)
        embedding_dim = _positive_int("embedding_dim", "EmbeddingBag", embedding_dim)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"EmbeddingBag: padding_idx {padding_idx} must be within num_embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.sparse, self.include_last_offset, self.padding_idx = sparse, include_last_offset, padding_idx
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, **_factory(device, dtype)))
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight)

    reset_parameters = Embedding.reset_parameters   # N(0, 1), the padding row zeroed
    _fill_padding_idx_with_zero = Embedding._fill_padding_idx_with_zero

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                             self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                             self.include_last_offset, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm=None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False, padding_idx=None):
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings,
                  include_last_offset, padding_idx)
        bag.weight.requires_grad = not freeze
        return bag

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}{Embedding._options_repr(self)}, mode={self.mode!r}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class Bilinear(Module):
    """y = x1^T A x2 + b: weight (out, in1, in2), bias (out,), both U(-1/sqrt(in1), 1/sqrt(in1))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        for name, v in (("in1_features", in1_features), ("in2_features", in2_features),
                        ("out_features", out_features)):
            _positive_int(name, "Bilinear", v)
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        kw = _factory(device, dtype)
        self.weight = Parameter(empty(out_features, in1_features, in2_features, **kw))
        self.bias = Parameter(empty(out_features, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
