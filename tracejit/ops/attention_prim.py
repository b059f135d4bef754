"""Self-attention's context ``W @ V`` on the packed q/k/v projection, as a primitive whose
backward writes the q, k and v gradients straight into the packed layout; and its weights
``W = softmax(q k^T * scale + mask)`` as one primitive (`attention_weights`). The CPU
backend registers per-batch-element forms (compiler/cpu/kernels/attention_kernels.py).

Why: multi-head attention projects tokens with one GEMM into a packed (tokens, 3E) ``qkv``
and cuts q, k, v out as strided head views. As composites, the three gradients are then
concatenated into the packed gradient: a full extra pass (~3 ms of the Transformer encoder
step). With one node making all three, each GEMM writes its slice of the packed buffer.

The contract: ``attention_context(qkv, w)`` is ``w @ v`` for ``w`` computed from the same
``qkv`` by the caller (ops/attention.py), with a mask needing no gradient. Its VJP returns
the whole gradient of ``qkv`` (through ``v`` and, through ``w``, ``q`` and ``k``) and none
for ``w``, so the weights' own graph stays idle; other uses of ``w`` still send gradients
through it. For second derivatives `attention_backward` has its own VJP whose ``w``
gradient flows back through the weights' graph.

Layouts: ``qkv`` is (a * c, 3E) for tokens laid out (a, c) (batch-first, or sequence-first
with ``seq_first``), each row [q | k | v] of [head, head_dim]; ``w`` is (N, H, T, T); the
context is (a, c, E).
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..shapes import as_dim
from .creation import zeros
from .linalg import matmul
from .registry import Aval, defprim
from .eager import bind
from .shape import permute, reshape, stack, transpose
from .softmax_prim import SOFTMAX_BACKWARD, softmax_backward, softmax_backward_passes, softmax_passes

__all__ = ["attention_weights", "attention_context", "attention_backward"]

# (a, c, H, hd) token layout -> (N, H, T, hd) heads layout, and back
_TO_HEADS = {False: (0, 2, 1, 3), True: (1, 2, 0, 3)}
_TO_TOKENS = {False: (0, 2, 1, 3), True: (2, 0, 1, 3)}


def _split(shape, tokens, heads):
    a, c = tokens
    e = shape[-1] // 3
    return a, c, e, e // heads


# ---------------------------------------------------------------- array helpers (impls)

def _parts(xp, qkv, tokens, heads, seq_first):
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    p5 = xp.reshape(qkv, (a, c, 3, heads, hd))
    perm = _TO_HEADS[seq_first]
    return p5, tuple(p5[:, :, i].transpose(perm) for i in range(3))


def _matmul_into(xp, a, b, out) -> None:
    """``out[...] = a @ b``: numpy's matmul writes a strided `out` directly (its BLAS calls
    take the row stride); other array modules get a product and a copy."""
    if xp is np:
        np.matmul(a, b, out=out)
    else:
        out[...] = xp.matmul(a, b)


def _weights_impl(xp, qkv, *mask, tokens, heads, seq_first, scale):
    _, (q, k, _) = _parts(xp, qkv, tokens, heads, seq_first)
    s = xp.matmul(q, xp.swapaxes(k, -1, -2))
    return softmax_passes(xp, s, mask[0] if mask else None, 3, scale)


def _context_impl(xp, qkv, w, *, tokens, heads, seq_first, scale):
    # (scale: only the VJP reads it)
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    _, (_, _, v) = _parts(xp, qkv, tokens, heads, seq_first)
    out = xp.empty((a, c, heads, hd), dtype=qkv.dtype)
    _matmul_into(xp, w, v, out.transpose(_TO_HEADS[seq_first]))
    return out.reshape(a, c, e)


def backward_parts(xp, g, qkv, tokens, heads, seq_first):
    """(q, k, v, g's heads, the packed gradient (a, c, 3, H, hd), and its q, k, v parts as
    head views) for `attention_backward`'s forms."""
    a, c, e, hd = _split(qkv.shape, tokens, heads)
    perm = _TO_HEADS[seq_first]
    _, (q, k, v) = _parts(xp, qkv, tokens, heads, seq_first)
    gh = xp.reshape(g, (a, c, heads, hd)).transpose(perm)
    out = xp.empty((a, c, 3, heads, hd), dtype=qkv.dtype)
    return q, k, v, gh, out, tuple(out[:, :, i].transpose(perm) for i in range(3))


def _backward_impl(xp, g, qkv, w, *, tokens, heads, seq_first, scale):
    q, k, v, gh, out, (oq, ok, ov) = backward_parts(xp, g, qkv, tokens, heads, seq_first)
    backward_slice(xp, slice(None), w, gh, q, k, v, oq, ok, ov, scale)
    return out.reshape(qkv.shape)


def backward_slice(xp, b, w, gh, q, k, v, oq, ok, ov, scale) -> None:
    """`attention_backward`'s work on the batch slice `b` as array operations: its numpy
    form (the whole batch), and the CPU's per part while its kernels are not loaded."""
    wb, gb = w[b], gh[b]
    _matmul_into(xp, xp.swapaxes(wb, -1, -2), gb, ov[b])          # dv = w^T g
    dw = xp.matmul(gb, xp.swapaxes(v[b], -1, -2))                 # dw = g v^T
    ds = softmax_backward_passes(xp, dw, wb, wb.ndim - 1, scale)
    _matmul_into(xp, ds, k[b], oq[b])                             # dq = ds k
    _matmul_into(xp, xp.swapaxes(ds, -1, -2), q[b], ok[b])        # dk = ds^T q


# ---------------------------------------------------------------- shape rules

def _check(op: str, qkv: Aval, tokens, heads) -> None:
    a, c = tokens
    if qkv.ndim != 2 or qkv.shape[0] != a * c or qkv.shape[1] % (3 * heads):
        raise ShapeError(f"{op}: packed q/k/v should be ({a * c}, 3 * E) with E a "
                         f"multiple of {heads} heads, got {tuple(qkv.shape)}")


def _context_rule(qkv: Aval, w: Aval, *, tokens, heads, seq_first, scale=1.0):
    if not qkv.dtype.is_floating_point or w.dtype is not qkv.dtype:
        raise DTypeError(f"attention_context: packed q/k/v ({qkv.dtype.name}) and weights "
                         f"({w.dtype.name}) must be one floating point dtype")
    _check("attention_context", qkv, tokens, heads)
    a, c, e, _ = _split(qkv.shape, tokens, heads)
    n, t = (c, a) if seq_first else (a, c)
    if tuple(w.shape) != (n, heads, t, t):
        raise ShapeError(f"attention_context: weights should be {(n, heads, t, t)}, got {tuple(w.shape)}")
    return Aval((a, c, e), qkv.dtype, qkv.device)


def _weights_rule(qkv: Aval, *mask, tokens, heads, seq_first, scale):
    if not qkv.dtype.is_floating_point:
        raise DTypeError(f"attention_weights: packed q/k/v must be floating point, got {qkv.dtype.name}")
    _check("attention_weights", qkv, tokens, heads)
    a, c = tokens
    n, t = (c, a) if seq_first else (a, c)
    shape = (n, heads, t, t)
    if mask:
        m = mask[0]
        ms = (1,) * (4 - len(m.shape)) + tuple(m.shape)
        if m.dtype is not qkv.dtype or len(m.shape) > 4 or any(x != 1 and x != y for x, y in zip(ms, shape)):
            raise ShapeError(f"attention_weights: the additive mask ({tuple(m.shape)} {m.dtype.name}) "
                             f"should broadcast to the weights {shape} in {qkv.dtype.name}")
    return Aval(shape, qkv.dtype, qkv.device)


def _backward_rule(g: Aval, qkv: Aval, w: Aval, *, tokens, heads, seq_first, scale):
    out = _context_rule(qkv, w, tokens=tokens, heads=heads, seq_first=seq_first)
    if tuple(g.shape) != tuple(out.shape) or g.dtype is not qkv.dtype:
        raise ShapeError(f"attention_backward: gradient {tuple(g.shape)} {g.dtype.name} should be "
                         f"{tuple(out.shape)} {qkv.dtype.name}")
    return Aval(qkv.shape, qkv.dtype, qkv.device)


# ---------------------------------------------------------------- VJPs (tracejit ops)

def _heads(x, tokens, heads, seq_first, part=None):
    """(N, H, T, hd) view of a (a, c, E) tensor, or of part `part` of a packed (a*c, 3E) one."""
    a, c = tokens
    if part is None:
        hd = x.shape[-1] // heads
        return permute(reshape(x, (a, c, heads, hd)), _TO_HEADS[seq_first])
    hd = x.shape[-1] // (3 * heads)
    return permute(reshape(x, (a, c, 3, heads, hd))[:, :, part], _TO_HEADS[seq_first])


def _pack(parts, tokens, seq_first):
    """(N, H, T, hd) q, k, v gradients -> packed (a*c, 3E)."""
    a, c = tokens
    back = [permute(p, _TO_TOKENS[seq_first]) for p in parts]         # (a, c, H, hd)
    s = stack(back, 2)                                                 # (a, c, 3, H, hd)
    return reshape(s, (a * c, 3 * back[0].shape[2] * back[0].shape[3]))


def _weights_vjp(gw, w, qkv, *mask, tokens, heads, seq_first, scale):
    """w = softmax(q k^T * scale + mask): the packed gradient (dq | dk | 0); the mask needs
    none (attention_weights' precondition)."""
    q, k, v = (_heads(qkv, tokens, heads, seq_first, i) for i in range(3))
    ds = softmax_backward(gw, w, 3, scale)
    dq = matmul(ds, k)
    dk = matmul(transpose(ds, -2, -1), q)
    dv = zeros(tuple(v.shape), dtype=v.dtype, device=v.device)
    return (_pack((dq, dk, dv), tokens, seq_first),) + (None,) * len(mask)


def _backward_vjp(cot, out, g, qkv, w, *, tokens, heads, seq_first, scale):
    """Cotangent `cot` of (dq | dk | dv) = (ds k | ds^T q | w^T g), ds = B(g v^T, w)."""
    q, k, v = (_heads(qkv, tokens, heads, seq_first, i) for i in range(3))
    cq, ck, cv = (_heads(cot, tokens, heads, seq_first, i) for i in range(3))
    gh = _heads(g, tokens, heads, seq_first)
    dw = matmul(gh, transpose(v, -2, -1))
    ds = softmax_backward(dw, w, 3, scale)
    ds_bar = matmul(cq, transpose(k, -2, -1)) + matmul(q, transpose(ck, -2, -1))
    q_bar = matmul(ds, ck)
    k_bar = matmul(transpose(ds, -2, -1), cq)
    # through ds = softmax_backward(dw, w, scale): that primitive's own VJP
    dw_bar, w_bar = SOFTMAX_BACKWARD.vjp(ds_bar, ds, dw, w, dim=3, scale=scale)
    w_bar = w_bar + matmul(gh, transpose(cv, -2, -1))                # dv = w^T g
    g_bar = matmul(dw_bar, v) + matmul(w, cv)
    v_bar = matmul(transpose(dw_bar, -2, -1), gh)
    g_tok = reshape(permute(g_bar, _TO_TOKENS[seq_first]), tuple(g.shape))
    return g_tok, _pack((q_bar, k_bar, v_bar), tokens, seq_first), w_bar


ATTENTION_WEIGHTS = defprim("attention_weights", _weights_impl, _weights_rule, _weights_vjp,
                            kind="other", save=lambda rq: (0,), save_out=True,
                            grad_name="AttentionWeightsBackward0")

# (the VJP: the whole gradient of qkv, see the top; none for w)
ATTENTION_CONTEXT = defprim("attention_context", _context_impl, _context_rule,
                            lambda g, out, qkv, w, **p: (attention_backward(g, qkv, w, **p), None),
                            kind="other", save=lambda rq: (0, 1), grad_name="AttentionBackward0")

ATTENTION_BACKWARD = defprim("attention_backward", _backward_impl, _backward_rule, _backward_vjp,
                             kind="other", save=lambda rq: (0, 1, 2),
                             grad_name="AttentionBackwardBackward0")


def attention_weights(qkv, mask=None, *, tokens: tuple, heads: int, seq_first: bool, scale: float):
    """``softmax(q k^T * scale + mask)`` (N, H, T, T) of packed ``qkv`` (a*c, 3E), per batch
    slice so the scores are normalized while in cache. ``mask``: None, or an additive float
    mask of qkv's dtype that needs no gradient."""
    kw = dict(tokens=tuple(as_dim(t) for t in tokens), heads=int(heads), seq_first=bool(seq_first),
              scale=float(scale))
    return bind(ATTENTION_WEIGHTS, qkv, **kw) if mask is None else bind(ATTENTION_WEIGHTS, qkv, mask, **kw)


def attention_context(qkv, w, *, tokens: tuple, heads: int, seq_first: bool, scale: float):
    """``w @ v`` as (a, c, E), v the third part of packed ``qkv`` (a*c, 3E); ``w`` must be
    ``softmax(q k^T * scale + mask)`` of the same ``qkv`` with a mask needing no gradient
    (module docstring)."""
    return bind(ATTENTION_CONTEXT, qkv, w, tokens=tuple(as_dim(t) for t in tokens), heads=int(heads),
                seq_first=bool(seq_first), scale=float(scale))


def attention_backward(g, qkv, w, *, tokens: tuple, heads: int, seq_first: bool, scale: float):
    """Packed (a*c, 3E) gradient of ``qkv`` for output gradient `g` (a, c, E)."""
    return bind(ATTENTION_BACKWARD, g, qkv, w, tokens=tuple(as_dim(t) for t in tokens),
                heads=int(heads), seq_first=bool(seq_first), scale=float(scale))
