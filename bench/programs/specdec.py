"""Speculative decoding between a draft and a target GPT, as the minimal reimplementations
write it.

nanoGPT blocks with a (k, v) cache per layer grown by ``torch.cat`` and cut back to the
accepted length after each round; the causal mask of the new queries against the cache by
``tril(diagonal=L - T)`` into ``scaled_dot_product_attention``. Target: 4 layers of 128;
draft: 1 layer of 64 (vocabulary 96, tied heads). A step is one generation under
``torch.inference_mode``: a 16-token prompt, then 32 tokens in rounds of gamma=4 drafted
one at a time by ``torch.multinomial`` on the top-k softmax, verified by one target call on
5 tokens, accepted while ``torch.rand() < p / q``, the first rejection resampled from
``clamp(p - q, min=0)`` (k=1: the same tokens in every framework). The step's "loss": the
accepted count plus the mean of the last target logits. Compiled: both models, called
with a cache whose length changes every call.
"""
import torch
import torch.nn as nn
from torch.nn import functional as F

from .common import load_params, rng

NAME = "specdec"
VOCAB, BLOCK, PROMPT, NEW, GAMMA = 96, 64, 16, 32, 4


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x, kv_cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if kv_cache is not None:
            k, v = torch.cat([kv_cache[0], k], dim=2), torch.cat([kv_cache[1], v], dim=2)
        L = k.size(2)
        mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=L - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)), (k, v)


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, kv_cache=None):
        a, cache = self.attn(self.ln_1(x), kv_cache)
        x = x + a
        return x + self.mlp(self.ln_2(x)), cache


class GPT(nn.Module):
    def __init__(self, n_layer, n_embd, n_head):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, n_embd), nn.Embedding(BLOCK, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, kv_caches=None):
        past = 0 if kv_caches is None else kv_caches[0][0].size(2)
        x = self.wte(idx) + self.wpe(torch.arange(past, past + idx.size(1)))
        new_caches = []
        for i, block in enumerate(self.h):
            x, c = block(x, None if kv_caches is None else kv_caches[i])
            new_caches.append(c)
        return self.lm_head(self.ln_f(x)), new_caches


def norm_logits(logits, temperature, top_k):
    logits = logits / temperature
    v, _ = torch.topk(logits, top_k)
    return F.softmax(logits.masked_fill(logits < v[..., [-1]], float("-inf")), dim=-1)


def crop(caches, length):
    return [(k[:, :, :length], v[:, :, :length]) for k, v in caches]


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.prompt = torch.from_numpy(r.integers(0, VOCAB, (1, PROMPT)))
        self.target, self.draft = GPT(4, 128, 4), GPT(1, 64, 2)
        load_params(NAME, self.target, self.draft)
        self.target.eval(), self.draft.eval()
        self.t_fwd, self.d_fwd = compile(self.target), compile(self.draft)

    @torch.inference_mode()
    def step(self) -> float:
        target, draft, seq, top_k = self.t_fwd, self.d_fwd, self.prompt, 1
        _, t_cache = target(seq[:, :-1])
        _, d_cache = draft(seq[:, :-1])
        accepted = 0
        while seq.size(1) < PROMPT + NEW:
            n0, tok, qs, drafted = seq.size(1), seq[:, -1:], [], []
            for _ in range(GAMMA):
                logits, d_cache = draft(tok, d_cache)
                q = norm_logits(logits[:, -1], 0.8, top_k)
                tok = torch.multinomial(q, num_samples=1)
                qs.append(q), drafted.append(tok)
            drafted = torch.cat(drafted, dim=1)
            logits, t_cache = target(torch.cat([seq[:, -1:], drafted], dim=1), t_cache)
            p = norm_logits(logits, 0.8, top_k)
            n = GAMMA
            for i in range(GAMMA):
                x = drafted[0, i]
                if not torch.rand(1) < p[0, i, x] / qs[i][0, x]:
                    n = i
                    break
            accepted += n
            if n < GAMMA:
                resid = torch.clamp(p[:, n] - qs[n], min=0)
                nxt = torch.multinomial(resid / resid.sum(dim=-1, keepdim=True), num_samples=1)
            else:
                nxt = torch.multinomial(p[:, GAMMA], num_samples=1)
                _, d_cache = draft(drafted[:, -1:], d_cache)
            seq = torch.cat([seq, drafted[:, :n], nxt], dim=1)
            t_cache, d_cache = crop(t_cache, n0 + n), crop(d_cache, n0 + n)
        return accepted + logits[0, -1].mean().item()
