"""Attention and Transformer layers: MultiheadAttention, TransformerEncoderLayer,
TransformerDecoderLayer, TransformerEncoder, TransformerDecoder, Transformer.

PyTorch's parameter names (``in_proj_weight``/``in_proj_bias``/``out_proj``,
``q_proj_weight``... when key/value sizes differ, ``linear1``/``linear2``/``norm1``...),
initialisation and argument conventions (sequence-first unless ``batch_first``; bool
masks mark with True what may *not* be attended to), so a PyTorch state_dict loads.
The math is ``tracejit.ops.attention`` (matmuls around a softmax).
"""
from __future__ import annotations

import copy
import warnings
from typing import Callable, Optional, Union

from ..ops import empty, zeros
from ..ops.attention import _mha
from ..ops.composite import gelu
from ..ops.elementwise import relu
from ..ops.shape import reshape, transpose
from ..ops.tensorfns import triu
from . import init
from .containers import ModuleList
from .dropout import Dropout
from .layers import LayerNorm, Linear, _factory, _positive_int
from .module import Module
from .parameter import Parameter

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer",
           "TransformerEncoder", "TransformerDecoder", "Transformer"]


class MultiheadAttention(Module):
    """Multi-head attention: ``forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False)``
    returns ``(output, weights or None)``."""
    _repr_fields = ("embed_dim", "num_heads", "batch_first")

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        _positive_int("embed_dim", "MultiheadAttention", embed_dim)
        _positive_int("num_heads", "MultiheadAttention", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        kw = _factory(device, dtype)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        # PyTorch: xavier_uniform on the packed (or separate) projections, zero biases,
        # xavier_normal on bias_k/bias_v; out_proj.weight keeps Linear's default init.
        for w in ((self.in_proj_weight,) if self._qkv_same_embed_dim
                  else (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)):
            init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        if query.ndim not in (2, 3):
            raise ValueError(f"MultiheadAttention: query should be 2-D (unbatched) or 3-D, got "
                             f"shape {tuple(query.shape)}")
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"MultiheadAttention: query has {query.shape[-1]} features, expected "
                             f"embed_dim={self.embed_dim}")
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(f"MultiheadAttention: key/value features ({key.shape[-1]}, "
                             f"{value.shape[-1]}) do not match kdim={self.kdim}, vdim={self.vdim}")
        batched = query.ndim == 3
        # batch-first inputs stay batch-first: the projections then read the tokens as they
        # lie in memory (a transposed view made numpy run one small GEMM per position)
        native = self.batch_first and batched and self.bias_k is None and not self.add_zero_attn
        if self.batch_first and batched and not native:
            query, key, value = (transpose(t, 0, 1) for t in (query, key, value))
        out, weights = _mha(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.bias_k, self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight,
            self.out_proj.bias, training=self.training, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal, batch_first=native)
        if self.batch_first and batched and not native:
            out = transpose(out, 0, 1)
        return out, weights


def _activation(activation: Union[str, Callable]):
    if callable(activation):
        return activation
    if activation == "relu":
        return relu
    if activation == "gelu":
        return gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _TransformerLayer(Module):
    """What the encoder and decoder layers share: the submodules, registered in PyTorch's
    order (`_cross`: a decoder layer's, with cross-attention and a third norm and dropout),
    the self-attention block and the feed-forward block."""
    _cross = False

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Union[str, Callable] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        for name in ("self_attn", "multihead_attn") if self._cross else ("self_attn",):
            setattr(self, name, MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                   batch_first=batch_first, **kw))
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        count = 3 if self._cross else 2
        for i in range(1, count + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for i in range(1, count + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)
        self.activation_relu_or_gelu = _relu_or_gelu(activation)   # (PyTorch's 1, 2 or 0)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal and attn_mask is not None)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        last = self.dropout3 if self._cross else self.dropout2

        def block(t):
            return last(self.linear2(self.dropout(self.activation(self.linear1(t)))))
        return _per_token(block, x)


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with dropout, a residual and
    LayerNorm (after the residual, or before the block when ``norm_first``)."""

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return _ff_residual(x, self._ff_block, self.norm2, self.norm_first)


class TransformerDecoderLayer(_TransformerLayer):
    """Self-attention, cross-attention over ``memory``, then a feed-forward block."""
    _cross = True

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask)
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask))
        return _ff_residual(x, self._ff_block, self.norm3, self.norm_first)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False)[0]
        return self.dropout2(x)


def _ff_residual(x, ff, norm, norm_first: bool):
    """``x + ff(norm(x))`` (norm_first) or ``norm(x + ff(x))``, for a 3-D x on its
    (tokens, features) rows, so a compiled layer fuses the last bias add and the residual
    add into one pass. Same values."""
    def step(t):
        return t + ff(norm(t)) if norm_first else norm(t + ff(t))
    return _per_token(step, x)


def _per_token(fn, x):
    """`fn` (position-wise: the feed-forward block) applied to a 3-D x as a 2-D (tokens,
    features) batch: numpy runs a 3-D product as one GEMM per leading index (batch 16 x
    seq 128 x 256 @ 256 x 1024: 16 GEMMs, 15.4 ms against 11.7 ms as one, one thread)."""
    if x.ndim != 3:
        return fn(x)
    a, b, e = x.shape
    y = fn(reshape(x, (a * b, e)))
    return reshape(y, (a, b, y.shape[-1]))


def _stack(m: Module, layer: Module, num_layers: int, norm: Optional[Module]) -> None:
    """An encoder's or decoder's ``num_layers`` independent copies of `layer` and its norm."""
    _positive_int("num_layers", type(m).__name__, num_layers)
    m.layers = ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
    m.num_layers = num_layers
    m.norm = norm


def _relu_or_gelu(activation) -> int:
    from . import functional as F
    from .layers import GELU, ReLU
    if isinstance(activation, str):
        return {"relu": 1, "gelu": 2}.get(activation, 0)
    if isinstance(activation, ReLU) or activation is relu or activation is F.relu:
        return 1
    if isinstance(activation, GELU) or activation is gelu or activation is F.gelu:
        return 2
    return 0


def _why_not_nested(layer: Module) -> str:
    """PyTorch's reasons an encoder of `layer`s keeps padded positions in inference."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    attn = layer.self_attn
    for bad, why in ((layer.norm_first, "encoder_layer.norm_first was True"),
                     (not attn.batch_first, "encoder_layer.self_attn.batch_first was not True"),
                     (not attn._qkv_same_embed_dim, "encoder_layer.self_attn._qkv_same_embed_dim was not True"),
                     (attn.in_proj_bias is None, "encoder_layer.self_attn was passed bias=False"),
                     (not layer.activation_relu_or_gelu, "encoder_layer.activation_relu_or_gelu was not True"),
                     (layer.norm1.eps != layer.norm2.eps, "encoder_layer.norm1.eps was not equal to encoder_layer.norm2.eps"),
                     (attn.num_heads % 2 == 1, "encoder_layer.self_attn.num_heads is odd")):
        if bad:
            return why
    return ""


class TransformerEncoder(Module):
    """``num_layers`` independent copies of ``encoder_layer``, then an optional ``norm``.
    As PyTorch's with ``enable_nested_tensor``: in inference (eval, no gradient) with a
    right-padded ``src_key_padding_mask`` and no ``mask``, the padded positions come out
    as zeros before the norm, where PyTorch's nested tensors leave them out."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Optional[Module] = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        _stack(self, encoder_layer, num_layers, norm)
        self.enable_nested_tensor = self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why}",
                          stacklevel=2)
            self.use_nested_tensor = False

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        if self._drops_padding(src, mask, src_key_padding_mask):
            x = x.masked_fill((src_key_padding_mask != 0).unsqueeze(-1), 0.0)
        return self.norm(x) if self.norm is not None else x

    def _drops_padding(self, src, mask, padding) -> bool:
        from ..autograd.grad_mode import is_grad_enabled
        from ..compiler import is_compiling
        from ..top_compat import is_autocast_enabled
        first = self.layers[0]
        if (not getattr(self, "use_nested_tensor", False) or first.training or src.ndim != 3 or padding is None
                or mask is not None or is_autocast_enabled()):
            return False
        check = getattr(self, "mask_check", True)
        if check and is_compiling():   # (PyTorch skips the check, and so the nesting, compiled)
            return False
        attn = first.self_attn
        if is_grad_enabled() and any(t is not None and t.requires_grad for t in (
                src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
                first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias,
                first.linear1.weight, first.linear1.bias, first.linear2.weight, first.linear2.bias)):
            return False
        valid = padding == 0
        # (left-aligned: no valid position after a padded one)
        return not (check and bool((valid[:, 1:] & ~valid[:, :-1]).any()))


class TransformerDecoder(Module):
    """``num_layers`` independent copies of ``decoder_layer``, then an optional ``norm``."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Optional[Module] = None):
        super().__init__()
        _stack(self, decoder_layer, num_layers, norm)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False):
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """Encoder-decoder Transformer (PyTorch's ``nn.Transformer`` layout and defaults)."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Union[str, Callable] = "relu", custom_encoder=None, custom_decoder=None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        common = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                      layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first,
                      bias=bias, **kw)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **common), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **common), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():  # PyTorch re-initialises every matrix with xavier_uniform
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal=None, tgt_is_causal=None, memory_is_causal: bool = False):
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """Float mask with -inf above the diagonal (each position sees itself and the past)."""
        full = zeros(sz, sz, dtype=dtype, device=device) + float("-inf")
        return triu(full, 1)
