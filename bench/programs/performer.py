"""A Performer language model training step (performer-pytorch's layers, at small size).

FAVOR+ causal linear attention: positive softmax-kernel features of queries and keys
against a Gaussian orthogonal random matrix (exp of projections minus the squared norm
and a detached amax), then prefix sums of key-value outer products by ``cumsum`` over
chunks of 64 and an einsum of the queries against them; one of 4 heads is a local head
(sliding-window attention over 16 earlier keys, looked up by ``Tensor.unfold`` of the
padded keys). ScaleNorm pre-norm, GELU feed-forward, 2 layers of width 64, batch 8 of
256 tokens, cross-entropy, Adam, clip_grad_norm_. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "performer"
BATCH, SEQ, VOCAB, DIM, HEADS, FEATURES, WINDOW = 8, 256, 64, 64, 4, 32, 16


def orthogonal_random_matrix(r, rows, cols):
    blocks = [torch.linalg.qr(torch.from_numpy(r.standard_normal((cols, cols)).astype(np.float32)))[0].t()
              for _ in range(-(-rows // cols))]
    final = torch.cat(blocks)[:rows]
    multiplier = torch.from_numpy(r.standard_normal((rows, cols)).astype(np.float32)).norm(dim=1)
    return torch.diag(multiplier) @ final


def softmax_kernel(data, projection_matrix, is_query, eps=1e-4):
    normalizer = data.shape[-1] ** -0.25
    ratio = projection_matrix.shape[0] ** -0.5
    data_dash = torch.einsum("...id,jd->...ij", normalizer * data, projection_matrix)
    diag_data = ((data ** 2).sum(dim=-1) / 2.0 * normalizer ** 2).unsqueeze(-1)
    stab = data_dash.amax(dim=-1, keepdim=True) if is_query else data_dash.amax(dim=(-1, -2), keepdim=True)
    return ratio * (torch.exp(data_dash - diag_data - stab.detach()) + eps)


def causal_linear_attention(q, k, v, chunk_size=64, eps=1e-6):
    last_k_cumsum, last_ctx_cumsum, outs = 0, 0, []
    for q, k, v in zip(*(t.split(chunk_size, dim=-2) for t in (q, k, v))):
        k_cumsum = last_k_cumsum + k.cumsum(dim=-2)
        d_inv = 1.0 / torch.einsum("...nd,...nd->...n", q, k_cumsum + eps)
        context_cumsum = last_ctx_cumsum + torch.einsum("...nd,...ne->...nde", k, v).cumsum(dim=-3)
        outs.append(torch.einsum("...nde,...nd,...n->...ne", context_cumsum, q, d_inv))
        last_k_cumsum, last_ctx_cumsum = k_cumsum[:, :, -1:], context_cumsum[:, :, -1:]
    return torch.cat(outs, dim=-2)


def local_attention(q, k, v):
    t, d = q.shape[-2:]
    k = F.pad(k, (0, 0, WINDOW, 0)).unfold(2, WINDOW + 1, 1)
    v = F.pad(v, (0, 0, WINDOW, 0)).unfold(2, WINDOW + 1, 1)
    sim = torch.einsum("bhtd,bhtdw->bhtw", q, k) * d ** -0.5
    pos = torch.arange(t)[:, None] + torch.arange(WINDOW + 1) - WINDOW
    attn = sim.masked_fill(pos < 0, -torch.finfo(sim.dtype).max).softmax(dim=-1)
    return torch.einsum("bhtw,bhtdw->bhtd", attn, v)


class SelfAttention(nn.Module):
    def __init__(self, r):
        super().__init__()
        self.register_buffer("projection_matrix", orthogonal_random_matrix(r, FEATURES, DIM // HEADS))
        self.to_qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.to_out = nn.Linear(DIM, DIM)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, HEADS, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        g = HEADS - 1
        out = torch.cat([causal_linear_attention(softmax_kernel(q[:, :g], self.projection_matrix, True),
                                                 softmax_kernel(k[:, :g], self.projection_matrix, False), v[:, :g]),
                         local_attention(q[:, g:], k[:, g:], v[:, g:])], dim=1)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class ScaleNorm(nn.Module):
    def __init__(self, eps=1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1) * DIM ** 0.5)
        self.eps = eps

    def forward(self, x):
        return x / torch.norm(x, dim=-1, keepdim=True).clamp(min=self.eps) * self.g


class PerformerLM(nn.Module):
    def __init__(self, r, depth=2):
        super().__init__()
        self.token_emb = nn.Embedding(VOCAB, DIM)
        self.pos_emb = nn.Embedding(SEQ, DIM)
        self.layers = nn.ModuleList([nn.ModuleList([
            ScaleNorm(), SelfAttention(r), ScaleNorm(),
            nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))]) for _ in range(depth)])
        self.norm = nn.LayerNorm(DIM)
        self.to_out = nn.Linear(DIM, VOCAB)

    def forward(self, x):
        x = self.token_emb(x) + self.pos_emb(torch.arange(x.shape[1]))
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x))
            x = x + ff(norm2(x))
        return self.to_out(self.norm(x))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = PerformerLM(r)
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        text = (np.arange(20000) * 7 % 61 + r.integers(0, 3, 20000)) % VOCAB
        self.batches = [torch.from_numpy(np.stack([text[s:s + SEQ + 1] for s in r.integers(0, 20000 - SEQ - 1, BATCH)]))
                        for _ in range(4)]
        self.i = 0

    def step(self) -> float:
        seq = self.batches[self.i % len(self.batches)]
        self.i += 1
        logits = self.forward(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.5)
        self.optimizer.step()
        return loss.item()
