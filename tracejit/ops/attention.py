"""Attention as composites: ``scaled_dot_product_attention`` and the multi-head
attention forward that ``nn.MultiheadAttention`` calls.

Both are batched matmuls around a softmax whose scale and additive mask are part of the
softmax op itself (ops/softmax_prim.py). Masks follow PyTorch: a bool mask marks with True
what may be attended to in ``scaled_dot_product_attention`` but what must *not* be in
``multi_head_attention_forward``; a float mask is added to the scores in both.
"""
from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dt
from ..errors import ShapeError
from .composite import dropout, softmax
from .creation import ones, zeros
from .eager import trace_state
from .elementwise import cast, isinf, where
from .linalg import linear, matmul
from .shape import cat, permute, reshape, squeeze, transpose, unsqueeze
from .attention_prim import attention_context, attention_weights
from .softmax_prim import softmax as _scaled_softmax
from .tensorfns import tril
from . import autocast as _autocast

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]


def _additive(mask, dtype, *, true_means_masked: bool):
    """A bool mask as 0 / -inf (float masks pass through, cast to the scores' dtype)."""
    if mask.dtype is _dt.bool_:
        # (one op, not zeros + logical_not + masked_fill: an eager causal mask per call)
        out = where(mask, -math.inf, 0.0) if true_means_masked else where(mask, 0.0, -math.inf)
        return out if out.dtype is dtype else cast(out, dtype)
    if not mask.dtype.is_floating_point:
        raise TypeError(f"attention mask must be bool or floating point, got {mask.dtype.name}")
    return cast(mask, dtype)


@_autocast.lower_widened
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """softmax(Q K^T * scale + mask) V over the last two dims (any leading batch dims)."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(f"scaled_dot_product_attention: query, key and value need at least 2 dims, "
                         f"got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: query {tuple(query.shape)} and key "
                         f"{tuple(key.shape)} must share the last dim, key and value "
                         f"{tuple(value.shape)} the sequence dim")
    if enable_gqa:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq % hk:
            raise ShapeError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of "
                             f"{hk} key/value heads")
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hk)
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    L, S = query.shape[-2], key.shape[-2]
    if attn_mask is not None:
        _check_mask(attn_mask, tuple(query.shape[:-2]) + (L, S))
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = matmul(query, transpose(key, -2, -1))
    mask = None
    if is_causal:
        allowed = cast(tril(ones(L, S, dtype=_dt.bool_, device=query.device)), _dt.bool_)
        mask = _additive(allowed, scores.dtype, true_means_masked=False)
    dead = None
    if attn_mask is not None and not is_causal:
        mask, dead = _dead_rows(_additive(attn_mask, scores.dtype, true_means_masked=False), attn_mask)
    weights = _masked_softmax(scores, scale, mask)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    out = matmul(weights, value)
    return out if dead is None else where(dead, 0.0, out)


def _dead_rows(mask, allowed=None) -> tuple:
    """PyTorch's safe softmax: a query row whose every key is masked attends to nothing and
    gives 0 (not softmax's nan, which a padded batch would carry into its gradients).
    -> (the additive mask with those rows 0, their (..., L or 1, 1) indicator), or (mask,
    None) where eagerly no row is masked through (no extra pass then). `allowed`: the bool
    mask (True: attended) `mask` was made from, whose rows say it in one reduction."""
    from .reductions import all as all_
    a = None if allowed is None or allowed.dtype is not _dt.bool_ else allowed._data
    if trace_state.tracer is None and type(a) is np.ndarray and a.ndim and a.any(-1).all():
        return mask, None
    m = mask._data
    if trace_state.tracer is None and type(m) is np.ndarray and m.dtype.kind == "f" and \
            not np.isneginf(m).all(-1).any():   # (the common answer, without five ops)
        return mask, None
    dead = all_(isinf(mask) & (mask < 0), -1, keepdim=True)
    if trace_state.tracer is None and not bool(dead.any()):
        return mask, None
    return where(dead, 0.0, mask), dead


def _check_mask(mask, scores_shape: tuple) -> None:
    """attn_mask must broadcast with the scores (..., L, S): named here, not by the add."""
    ms = tuple(mask.shape)
    if any(type(m) is int and type(s) is int and m != s and m != 1 and s != 1   # (symbolic dims: the add's)
           for m, s in zip(ms[::-1], scores_shape[::-1])):
        raise ShapeError(f"scaled_dot_product_attention: attn_mask of shape {ms} does not broadcast with "
                         f"the attention scores of shape {scores_shape} (..., L, S) of query "
                         f"(..., L={scores_shape[-2]}, E) and key (..., S={scores_shape[-1]}, E)")


def _masked_softmax(scores, scale: float, mask):
    """softmax(scores * scale + mask) over the last dim as one op (ops/softmax_prim.py: the
    scale and mask in the normalization's pass, forward and backward). A mask that would
    broadcast the scores to a larger shape is added first, as PyTorch's math does."""
    if not scores.dtype.is_floating_point:
        return softmax(scores * scale + (mask if mask is not None else 0.0), -1)
    if mask is not None and (mask.ndim > scores.ndim or any(
            m != 1 and m != s for m, s in zip(tuple(mask.shape)[::-1], tuple(scores.shape)[::-1]))):
        return softmax(scores * scale + mask, -1)
    return _scaled_softmax(scores, scores.ndim - 1, scale, mask)


def _context_takes(weights, shape: tuple, mask) -> bool:
    """attention_context's precondition: weights = softmax(scores * scale + mask) of the
    scores' `shape`, float, and a mask that needs no gradient (its gradient would come only
    through the weights' graph, which attention_context's VJP leaves idle)."""
    return (weights.dtype.is_floating_point and tuple(weights.shape) == tuple(shape)
            and (mask is None or _takes_no_grad(mask)))


def _weights_take(packed, mask, shape: tuple) -> bool:
    """attention_weights' precondition: a float projection, and no mask or one of its dtype
    that needs no gradient and broadcasts to the weights' `shape` without enlarging it."""
    if not packed.dtype.is_floating_point:
        return False
    if mask is None:
        return True
    ms = (1,) * (len(shape) - mask.ndim) + tuple(mask.shape)
    return (_takes_no_grad(mask) and mask.dtype is packed.dtype and mask.ndim <= len(shape)
            and all(m == 1 or m == s for m, s in zip(ms, shape)))


def _takes_no_grad(mask) -> bool:
    """No gradient can flow into `mask`: eagerly its flag; in a capture also no value that
    requires grad reaches it (a traced value's own flag, as tracejit's code reads it, is set
    for the arguments only: a float mask computed from one would lose its gradient)."""
    trace = getattr(mask, "_trace", None)
    return not mask.requires_grad and (trace is None or not trace._reaches_grad([mask._var]))


def _repeat_heads(x, n):
    # [..., Hk, S, E] -> [..., Hk * n, S, E], each head repeated n times in place (GQA)
    shape = tuple(x.shape)
    x = unsqueeze(x, -3)
    from .shape import expand
    x = expand(x, shape[:-2] + (n,) + shape[-2:])
    return reshape(x, shape[:-3] + (shape[-3] * n,) + shape[-2:])


def multi_head_attention_forward(query, key, value, embed_dim_to_check: int, num_heads: int,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn: bool,
                                 dropout_p: float, out_proj_weight, out_proj_bias,
                                 training: bool = True, key_padding_mask=None,
                                 need_weights: bool = True, attn_mask=None,
                                 use_separate_proj_weight: bool = False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
                                 average_attn_weights: bool = True, is_causal: bool = False):
    """PyTorch's ``F.multi_head_attention_forward`` (same arguments, same order): inputs
    (L, N, E) / (S, N, E) (or unbatched (L, E)); returns (output (L, N, E), weights (N, L, S)
    averaged over heads or (N, H, L, S), or None)."""
    return _mha(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training,
                key_padding_mask, need_weights, attn_mask, use_separate_proj_weight, q_proj_weight,
                k_proj_weight, v_proj_weight, static_k, static_v, average_attn_weights, is_causal)


def _proj(x, w, b):
    """``linear`` of a 3-D x as one 2-D GEMM over all tokens: numpy runs a 3-D product as
    one GEMM per leading index, with strided rows for a (L, N, E) view of batch-first data
    (over 2x the time for an encoder layer's projection)."""
    if x.ndim != 3:
        return linear(x, w, b)
    a, c, e = x.shape
    # the bias is added to the 3-D result: a residual add after it (the encoder layer's)
    # then has its shape and fuses with it when compiled
    y = reshape(linear(reshape(x, (a * c, e)), w, None), (a, c, w.shape[0]))
    return y if b is None else y + b


def _packed_self_projection(x, w, b, num_heads: int, seq: int) -> tuple:
    """(packed (T*N, 3E) projection, (q, k, v)) of self-attention, each [N, H, T, hd], from
    one GEMM of the tokens with the packed (3E, E) in_proj_weight: three separate products
    run at ~60% of its speed. The three head views are cut by one node eagerly
    (`unbind_steps`: backward one stack) and by int selects when traced."""
    from .step_slices import unbind_steps
    a, c, e = x.shape
    hd = e // num_heads
    packed = linear(reshape(x, (a * c, e)), w, b)
    qkv = reshape(packed, (a, c, 3, num_heads, hd))
    # seq-first [T, N, 3, H, hd] or batch-first [N, T, 3, H, hd], cut along its axis 2 and
    # each part permuted to [N, H, T, hd]: the gradients are stacked straight into the
    # (tokens, 3E) layout of the projection's weight GEMM, with no second copy
    heads = (0, 2, 1, 3) if seq else (1, 2, 0, 3)
    return packed, tuple(permute(p, heads) for p in unbind_steps(qkv, 2))


def _mha(query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k,
         bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
         key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False,
         q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None,
         average_attn_weights=True, is_causal=False, batch_first: bool = False):
    """`multi_head_attention_forward`; ``batch_first``: batched inputs and output are
    (N, L, E) (nn.MultiheadAttention(batch_first=True) passes its inputs as they come,
    so the projections run on the tokens as they lie in memory, not on a transposed
    view). Not with bias_k/bias_v or add_zero_attn (they extend the sequence axis)."""
    if batch_first and (bias_k is not None or add_zero_attn):
        raise ValueError("multi_head_attention: batch_first with bias_k/add_zero_attn is not supported")
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k/static_v are not supported")
    if query.shape[-1] != embed_dim_to_check:
        raise ShapeError(f"multi_head_attention: query has {query.shape[-1]} features but "
                         f"embed_dim_to_check is {embed_dim_to_check}")
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = unsqueeze(query, 1), unsqueeze(key, 1), unsqueeze(value, 1)
        if key_padding_mask is not None:
            key_padding_mask = unsqueeze(key_padding_mask, 0)
    if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
        raise ShapeError(f"multi_head_attention: expected query/key/value of 3 dims (seq, batch, embed), "
                         f"got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    seq = 1 if batch_first and not unbatched else 0     # the sequence axis of the inputs
    L, N, E = (query.shape[1], query.shape[0], query.shape[2]) if seq else query.shape
    S = key.shape[seq]
    if key.shape[1 - seq] != N or value.shape[1 - seq] != N or value.shape[seq] != S:
        raise ShapeError(f"multi_head_attention: key {tuple(key.shape)} and value {tuple(value.shape)} "
                         f"must match query {tuple(query.shape)} in batch and each other in length")
    if E % num_heads:
        raise ShapeError(f"multi_head_attention: embed_dim {E} is not divisible by num_heads {num_heads}")
    if is_causal and attn_mask is None:
        raise RuntimeError("multi_head_attention: is_causal is a hint that attn_mask is the causal "
                           "mask; pass attn_mask too")
    hd = E // num_heads
    thirds = (slice(0, E), slice(E, 2 * E), slice(2 * E, None))
    if query is key and key is value and not (use_separate_proj_weight or bias_k is not None
                                              or add_zero_attn):
        q = k = v = None            # self-attention: one packed projection, below
    else:
        ws = ((q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight
              else tuple(in_proj_weight[t] for t in thirds))
        bs = (None,) * 3 if in_proj_bias is None else tuple(in_proj_bias[t] for t in thirds)
        q, k, v = (_proj(x, w, b) for x, w, b in zip((query, key, value), ws, bs))
    mask = None
    if attn_mask is not None:
        mask = _additive(attn_mask, query.dtype, true_means_masked=True)
        if mask.ndim == 2:
            if tuple(mask.shape) != (L, S):
                raise ShapeError(f"multi_head_attention: 2-D attn_mask should be ({L}, {S}), got "
                                 f"{tuple(mask.shape)}")
            mask = reshape(mask, (1, 1, L, S))
        elif mask.ndim == 3:
            if tuple(mask.shape) != (N * num_heads, L, S):
                raise ShapeError(f"multi_head_attention: 3-D attn_mask should be "
                                 f"({N * num_heads}, {L}, {S}), got {tuple(mask.shape)}")
            mask = reshape(mask, (N, num_heads, L, S))
        else:
            raise ShapeError(f"multi_head_attention: attn_mask must be 2-D or 3-D, got {tuple(mask.shape)}")
    tails = []   # one more key position each, that nothing masks
    if bias_k is not None and bias_v is not None:
        tails.append((_expand_bias(bias_k, N), _expand_bias(bias_v, N)))
    if add_zero_attn:
        tails.append(tuple(zeros((1, N, E), dtype=t.dtype, device=t.device) for t in (k, v)))
    for tk, tv in tails:
        k, v = cat([k, tk], 0), cat([v, tv], 0)
        mask, key_padding_mask = _pad_last(mask), _pad_last(key_padding_mask)
        S += 1
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, S):
            raise ShapeError(f"multi_head_attention: key_padding_mask should be ({N}, {S}), got "
                             f"{tuple(key_padding_mask.shape)}")
        kpm = reshape(_additive(key_padding_mask, query.dtype, true_means_masked=True), (N, 1, 1, S))
        mask = kpm if mask is None else mask + kpm
    dead = None
    if mask is not None and not need_weights:   # (PyTorch runs SDPA then: its safe softmax)
        mask, dead = _dead_rows(mask)
    # [T, N, E] (or [N, T, E]) -> [N, H, T, hd]
    packed = None
    if q is None:
        packed, (q, k, v) = _packed_self_projection(query, in_proj_weight, in_proj_bias, num_heads, seq)
    else:
        q, k, v = (permute(reshape(t, (N, T, num_heads, hd) if seq else (T, N, num_heads, hd)),
                           (0, 2, 1, 3) if seq else (1, 2, 0, 3))
                   for t, T in ((q, L), (k, S), (v, S)))
    scale = 1.0 / math.sqrt(hd)
    shape = (N, num_heads, L, S)
    if packed is not None and _weights_take(packed, mask, shape):
        # scores and softmax per batch slice in one pass (ops/attention_prim.py)
        weights = attention_weights(packed, mask, tokens=(query.shape[0], query.shape[1]),
                                    heads=num_heads, seq_first=not seq, scale=scale)
    else:
        weights = _masked_softmax(matmul(q, transpose(k, -2, -1)), scale, mask)   # [N, H, L, S]
    dropped = dropout_p > 0.0 and training
    if packed is not None and not dropped and _context_takes(weights, shape, mask):
        # W @ V written in token layout; its backward makes the packed q/k/v gradient in
        # one buffer (ops/attention_prim.py)
        out = attention_context(packed, weights, tokens=(query.shape[0], query.shape[1]),
                                heads=num_heads, seq_first=not seq, scale=scale)
    else:
        if dropped:
            weights = dropout(weights, dropout_p)
        out = matmul(weights, v)                                        # [N, H, L, hd]
        if seq:
            out = reshape(permute(out, (0, 2, 1, 3)), (N, L, E))
        else:
            out = reshape(permute(out, (2, 0, 1, 3)), (L, N, E))
    if dead is not None:
        out = _zero_rows(out, dead, num_heads, seq)
    out = _proj(out, out_proj_weight, out_proj_bias)
    if unbatched:
        out = squeeze(out, 1)
    if not need_weights:
        return out, None
    if average_attn_weights:
        from .reductions import mean
        weights = mean(weights, 1)
    if unbatched:
        weights = squeeze(weights, 0)
    return out, weights


def _zero_rows(out, dead, heads: int, seq: bool):
    """The attention output `out` in token layout ((N, L, E), or (L, N, E)) with 0 in the
    heads' rows marked by `dead` (N or 1, H or 1, L or 1, 1)."""
    from .shape import expand
    N, L = (out.shape[0], out.shape[1]) if seq else (out.shape[1], out.shape[0])
    d = permute(expand(dead, (N, heads, L, 1)), (0, 2, 1, 3) if seq else (2, 0, 1, 3))
    o = reshape(out, tuple(out.shape[:2]) + (heads, out.shape[-1] // heads))
    return reshape(where(d, 0.0, o), tuple(out.shape))


def _expand_bias(b, n):
    from .shape import expand
    return expand(reshape(b, (1, 1, b.shape[-1])), (1, n, b.shape[-1]))


def _pad_last(mask):
    # one more key position (bias_k / zero attention) that nothing masks (None: no mask)
    if mask is None:
        return None
    pad_shape = tuple(mask.shape[:-1]) + (1,)
    return cat([mask, zeros(pad_shape, dtype=mask.dtype, device=mask.device)], -1)
