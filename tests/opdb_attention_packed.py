"""Op records for self-attention on the packed q/k/v projection (ops/attention_prim.py:
``attention_weights`` (scores and softmax) and its VJP, ``attention_context`` forward,
``attention_backward`` for its gradient, that op's own VJP for second derivatives), reached
as PyTorch users reach it: ``multi_head_attention_forward``
with query, key and value the same tensor. The weights the primitive takes are computed
from the same projection inside the call, so the precondition the primitive states holds,
and the op database's finite differences, second derivatives, PyTorch comparison, traced
and compiled runs check the whole first and second derivative. A float additive mask
(needing no gradient) and a boolean one (True = masked) ride along as inputs."""
from __future__ import annotations

import numpy as np

from opdb import FLOATS, Sample, arr, register

_E, _H = 6, 2


def _mha_self(m, x, w_in, b_in, w_out, b_out, *mask, heads):
    out, _ = m.nn.functional.multi_head_attention_forward(
        x, x, x, x.shape[-1], heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
        training=False, need_weights=False, attn_mask=mask[0] if mask else None)
    return out


def _np_mha_self(x, w_in, b_in, w_out, b_out, *mask, heads):
    L, N, E = x.shape
    hd = E // heads
    qkv = x @ w_in.T + b_in                                   # (L, N, 3E)

    def split(part):                                          # (N, H, L, hd)
        return part.reshape(L, N, heads, hd).transpose(1, 2, 0, 3)
    q, k, v = (split(qkv[..., i * E:(i + 1) * E]) for i in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    if mask:
        mk = mask[0]
        s = np.where(mk, -np.inf, s) if mk.dtype == np.bool_ else s + mk
    s = s - s.max(-1, keepdims=True)
    w = np.exp(s)
    w = w / w.sum(-1, keepdims=True)
    ctx = (w @ v).transpose(2, 0, 1, 3).reshape(L, N, E)
    return ctx @ w_out.T + b_out


def _samples(d, r):
    L, N = 4, 2

    def params():
        return (arr(r, (L, N, _E), d), arr(r, (3 * _E, _E), d, -0.8, 0.8), arr(r, (3 * _E,), d),
                arr(r, (_E, _E), d, -0.8, 0.8), arr(r, (_E,), d))
    causal = np.triu(np.ones((L, L), bool), 1)               # True above the diagonal: masked
    return [Sample(params(), {"heads": _H}),
            Sample(params() + (arr(r, (L, L), d, -1.0, 0.0),), {"heads": _H},
                   grad=(0, 1, 2, 3, 4), desc="float additive mask"),
            Sample(params() + (causal,), {"heads": _H}, grad=(0, 1, 2, 3, 4),
                   desc="boolean causal mask"),
            Sample(params(), {"heads": 1}, desc="one head")]


register("multi_head_attention_forward.self_packed", _mha_self, _np_mha_self, _samples,
         dtypes=FLOATS, atol=2e-5, rtol=2e-5)
