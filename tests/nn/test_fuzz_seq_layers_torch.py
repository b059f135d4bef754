"""Differential fuzzing of the sequence layers by configuration against PyTorch (the
harness: tests/layer_fuzz.py), eager and compiled, float32 and float64, train and eval:
RNN/LSTM/GRU (num_layers, bidirectional, batch_first, bias, proj_size, dropout 0, h0 given
or not, unbatched), MultiheadAttention (kdim/vdim, bias_kv, zero_attn, bool/float/3-D/causal
masks, key_padding_mask, need_weights, average_attn_weights, batch_first, unbatched) and
TransformerEncoder/Decoder layers and stacks (norm_first, activation relu/gelu/callable,
bias off, masks)."""
from __future__ import annotations

import numpy as np
import pytest

from layer_fuzz import check, draw, normal, pick

torch = pytest.importorskip("torch")

CASES = {}


def case(f):
    CASES[f.__name__] = f
    return f


@case
def rnn(r):
    kind = pick(r, ["RNN", "LSTM", "GRU"])
    L, bi, bf = draw(r, 1, 3), bool(r.integers(2)), bool(r.integers(2))
    H, In = draw(r, 1, 5), draw(r, 1, 4)
    kw = dict(input_size=In, hidden_size=H, num_layers=L, bidirectional=bi, batch_first=bf, bias=bool(r.integers(2)))
    if kind == "RNN":
        kw["nonlinearity"] = pick(r, ["tanh", "relu"])
    proj = 0
    if kind == "LSTM" and r.integers(2) and H > 1:
        proj = draw(r, 1, H)
        kw["proj_size"] = proj
    if L > 1 and r.integers(2):
        kw["dropout"] = 0.0
    T, N = draw(r, 1, 5), draw(r, 1, 4)
    unb = not r.integers(4)
    shape = (T, In) if unb else ((N, T, In) if bf else (T, N, In))
    x = normal(r, *shape)
    ins = [x]
    h0 = bool(r.integers(2))
    D = 2 if bi else 1
    hs = (D * L, proj or H) if unb else (D * L, N, proj or H)
    cs = (D * L, H) if unb else (D * L, N, H)
    if h0:
        ins.append(normal(r, *hs))
        if kind == "LSTM":
            ins.append(normal(r, *cs))

    def make(lib):
        class M(lib.nn.Module):
            def __init__(s):
                super().__init__()
                s.m = getattr(lib.nn, kind)(**kw)

            def forward(s, x, *h):
                if not h:
                    out, hn = s.m(x)
                elif kind == "LSTM":
                    out, hn = s.m(x, (h[0], h[1]))
                else:
                    out, hn = s.m(x, h[0])
                return (out,) + (tuple(hn) if isinstance(hn, tuple) else (hn,))
        return M()
    return make, ins, dict(name=kind, unb=unb, h0=h0, **kw)


@case
def mha(r):
    E = pick(r, [4, 6, 8]); heads = pick(r, [h for h in (1, 2, E // 2) if E % h == 0])
    kd = pick(r, [None, 3, E]); vd = pick(r, [None, 5, E]) if kd is not None else None
    bf = bool(r.integers(2))
    kw = dict(embed_dim=E, num_heads=heads, bias=bool(r.integers(2)), add_bias_kv=bool(r.integers(4) == 0),
              add_zero_attn=bool(r.integers(4) == 0), kdim=kd, vdim=vd, batch_first=bf)
    L, S, N = draw(r, 1, 5), draw(r, 1, 5), draw(r, 1, 3)
    unb = not r.integers(5)
    def shp(t, e):
        return (t, e) if unb else ((N, t, e) if bf else (t, N, e))
    self_attn = kd is None and vd is None and bool(r.integers(2))
    q = normal(r, *shp(L, E))
    ins = [q] if self_attn else [q, normal(r, *shp(S, kd or E)), normal(r, *shp(S, vd or E))]
    if self_attn:
        S = L
    Sx = S + (1 if kw["add_bias_kv"] else 0) + (1 if kw["add_zero_attn"] else 0)
    mk = pick(r, [None, "bool", "float", "bool3", "causal"])
    kpm = pick(r, [None, "bool", "float"]) if not unb else None
    nw = bool(r.integers(2)); avg = bool(r.integers(2))
    am = None
    if mk == "bool":
        am = r.integers(0, 2, size=(L, S)).astype(bool); am[:, 0] = False
    elif mk == "float":
        am = normal(r, L, S)
    elif mk == "bool3":
        am = r.integers(0, 2, size=((1 if unb else N) * heads, L, S)).astype(bool); am[..., 0] = False
    elif mk == "causal":
        am = np.triu(np.ones((L, S), bool), 1)
    km = None
    if kpm == "bool":
        km = r.integers(0, 2, size=(N, S)).astype(bool); km[:, 0] = False
    elif kpm == "float":
        km = normal(r, N, S)
    if (mk in ("bool", "bool3", "causal")) and kpm == "float" or (mk == "float" and kpm == "bool"):
        km = None  # torch deprecates mixing

    def make(lib):
        class M(lib.nn.Module):
            def __init__(s):
                super().__init__()
                s.m = lib.nn.MultiheadAttention(**kw)

            def forward(s, q, *kv):
                k, v = kv if kv else (q, q)
                o, w = s.m(q, k, v, key_padding_mask=None if km is None else lib.tensor(km).to(q.dtype) if km.dtype != bool else lib.tensor(km),
                           need_weights=nw, attn_mask=None if am is None else (lib.tensor(am) if am.dtype == bool else lib.tensor(am).to(q.dtype)),
                           average_attn_weights=avg, is_causal=False)
                return (o,) if w is None else (o, w)
        return M()
    return make, ins, dict(name="MHA", mk=mk, kpm=kpm, nw=nw, avg=avg, unb=unb, self_attn=self_attn, **kw)


@case
def transformer(r):
    dec = bool(r.integers(2))
    E = pick(r, [4, 8]); heads = pick(r, [1, 2])
    act = pick(r, ["relu", "gelu", "callable"])
    kw = dict(d_model=E, nhead=heads, dim_feedforward=draw(r, 3, 9), dropout=0.0, batch_first=bool(r.integers(2)),
              norm_first=bool(r.integers(2)), bias=bool(r.integers(2)), layer_norm_eps=pick(r, [1e-5, 1e-3]))
    L, S, N = draw(r, 1, 4), draw(r, 1, 4), draw(r, 1, 3)
    bf = kw["batch_first"]
    def shp(t):
        return (N, t, E) if bf else (t, N, E)
    ins = [normal(r, *shp(L))] + ([normal(r, *shp(S))] if dec else [])
    causal = bool(r.integers(2))
    kpm = r.integers(0, 2, size=(N, L)).astype(bool) if r.integers(2) else None
    if kpm is not None:
        kpm[:, 0] = False
    nlayers = draw(r, 1, 3)

    def make(lib):
        a = act if act != "callable" else lib.nn.functional.silu
        lay = (lib.nn.TransformerDecoderLayer if dec else lib.nn.TransformerEncoderLayer)(activation=a, **kw)
        class M(lib.nn.Module):
            def __init__(s):
                super().__init__()
                if nlayers > 1:
                    s.m = (lib.nn.TransformerDecoder if dec else lib.nn.TransformerEncoder)(lay, nlayers, enable_nested_tensor=False) if not dec else lib.nn.TransformerDecoder(lay, nlayers)
                else:
                    s.m = lay

            def forward(s, x, *mem):
                m = None if not causal else lib.triu(lib.full((L, L), float("-inf"), dtype=x.dtype), 1)
                kp = None if kpm is None else lib.tensor(kpm)
                if dec:
                    return s.m(x, mem[0], tgt_mask=m, tgt_key_padding_mask=kp)
                return s.m(x, m, src_key_padding_mask=kp)
        return M()
    return make, ins, dict(name="Transformer", dec=dec, act=act, causal=causal, kpm=kpm is not None, nlayers=nlayers, **kw)


@pytest.mark.parametrize("block", range(3))
def test_random_sequence_layer_configurations_match_torch(block):
    for seed in range(block * 40, block * 40 + 40):
        check(torch, CASES, seed, seed % 5 == 0)
