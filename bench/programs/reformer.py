"""A Reformer LM with LSH attention as reformer-pytorch writes it.

One step is a batch of 8 sequences of 256 tokens (copied motifs, next-token targets).
Shared query/key projections hashed by random rotations (a buffer) into 16 buckets per
round, 2 rounds: argmax over [xR, -xR], positions sorted by bucket with argsort, attention
in chunks of 16 plus the chunk before, self keys masked, causal by gathered positions, the
sort undone by gather and the rounds merged by logsumexp weights. 2 reversible blocks of
width 64 (each half 32, 2 heads), chunked feed-forward; cross-entropy, AdamW,
clip_grad_norm_. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "reformer"
VOCAB, WIDTH, DEPTH, SEQ, BUCKET, BATCH = 256, 32, 2, 256, 16, 8


TOKEN_SELF_ATTN_VALUE = -5e4


def batched_index_select(values, indices):
    last_dim = values.shape[-1]
    return values.gather(1, indices[:, :, None].expand(-1, -1, last_dim))


def look_one_back(x):
    x_extra = torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)
    return torch.cat([x, x_extra], dim=2)


class LSHAttention(nn.Module):
    def __init__(self, dim, max_seq_len, bucket_size=4, n_hashes=2, causal=True):
        super().__init__()
        self.bucket_size, self.n_hashes, self.causal = bucket_size, n_hashes, causal
        n_buckets = max_seq_len // bucket_size
        self.register_buffer("rotations", torch.randn(1, dim, n_hashes, n_buckets // 2))
    def hash_vectors(self, n_buckets, vecs):
        batch_size = vecs.shape[0]
        random_rotations = self.rotations[..., :n_buckets // 2].expand(batch_size, -1, -1, -1)
        rotated_vecs = torch.einsum('btf,bfhi->bhti', vecs, random_rotations)
        rotated_vecs = torch.cat([rotated_vecs, -rotated_vecs], dim=-1)
        buckets = torch.argmax(rotated_vecs, dim=-1)
        offsets = torch.arange(self.n_hashes)
        offsets = torch.reshape(offsets * n_buckets, (1, -1, 1))
        return torch.reshape(buckets + offsets, (batch_size, -1,))
    def forward(self, qk, v):
        batch_size, seqlen, dim = qk.shape
        n_buckets = seqlen // self.bucket_size
        buckets = self.hash_vectors(n_buckets, qk)
        total_hashes = self.n_hashes
        ticker = torch.arange(total_hashes * seqlen).unsqueeze(0).expand_as(buckets)
        buckets_and_t = seqlen * buckets + (ticker % seqlen)
        buckets_and_t = buckets_and_t.detach()
        sbuckets_and_t, sticker = buckets_and_t.sort(dim=-1)
        _, undo_sort = sticker.sort(dim=-1)
        del ticker
        st = (sticker % seqlen)
        sqk = batched_index_select(qk, st)
        sv = batched_index_select(v, st)
        chunk_size = total_hashes * n_buckets
        bq_t = bkv_t = torch.reshape(st, (batch_size, chunk_size, -1))
        bqk = torch.reshape(sqk, (batch_size, chunk_size, -1, dim))
        bv = torch.reshape(sv, (batch_size, chunk_size, -1, dim))
        bq = bqk
        bk = F.normalize(bqk, p=2, dim=-1).type_as(bq)
        bk, bv, bkv_t = look_one_back(bk), look_one_back(bv), look_one_back(bkv_t)
        dots = torch.einsum('bhie,bhje->bhij', bq, bk) * (dim ** -0.5)
        masked_value = -torch.finfo(dots.dtype).max
        if self.causal:
            mask = bq_t[:, :, :, None] < bkv_t[:, :, None, :]
            dots.masked_fill_(mask, masked_value)
        self_mask = bq_t[:, :, :, None] == bkv_t[:, :, None, :]
        dots.masked_fill_(self_mask, TOKEN_SELF_ATTN_VALUE)
        dots_logsumexp = torch.logsumexp(dots, dim=-1, keepdim=True)
        dots = torch.exp(dots - dots_logsumexp).type_as(dots)
        bo = torch.einsum('buij,buje->buie', dots, bv)
        so = torch.reshape(bo, (batch_size, -1, dim))
        slogits = torch.reshape(dots_logsumexp, (batch_size, -1,))
        o = batched_index_select(so, undo_sort)
        logits = slogits.gather(1, undo_sort)
        o = torch.reshape(o, (batch_size, total_hashes, seqlen, dim))
        logits = torch.reshape(logits, (batch_size, total_hashes, seqlen, 1))
        probs = torch.exp(logits - torch.logsumexp(logits, dim=1, keepdim=True))
        return torch.sum(o * probs, dim=1)


class LSHSelfAttention(nn.Module):
    def __init__(self, dim, max_seq_len, heads=2, **kwargs):
        super().__init__()
        self.heads = heads
        self.toqk = nn.Linear(dim, dim, bias=False)
        self.tov = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.lsh_attn = LSHAttention(dim // heads, max_seq_len, **kwargs)
    def forward(self, x):
        b, t, e, h = *x.shape, self.heads
        def merge_heads(v):
            return v.view(b, t, h, -1).transpose(1, 2).reshape(b * h, t, -1)
        qk, v = merge_heads(self.toqk(x)), merge_heads(self.tov(x))
        out = self.lsh_attn(qk, v)
        out = out.view(b, h, t, -1).transpose(1, 2).reshape(b, t, -1)
        return self.to_out(out)


class ChunkedFeedForward(nn.Module):
    def __init__(self, dim, chunks=2):
        super().__init__()
        self.chunks = chunks
        self.net = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
    def forward(self, x):
        return torch.cat([self.net(c) for c in x.chunk(self.chunks, dim=-2)], dim=-2)


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn
    def forward(self, x):
        return self.fn(self.norm(x))


class ReversibleBlock(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.f, self.g = f, g
    def forward(self, x):
        x1, x2 = torch.chunk(x, 2, dim=2)
        y1 = x1 + self.f(x2)
        y2 = x2 + self.g(y1)
        return torch.cat([y1, y2], dim=2)


class ReformerLM(nn.Module):
    def __init__(self, num_tokens, dim, depth, max_seq_len, bucket_size=4):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList([ReversibleBlock(PreNorm(dim, LSHSelfAttention(dim, max_seq_len, bucket_size=bucket_size)),
                                                     PreNorm(dim, ChunkedFeedForward(dim)))
                                     for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, num_tokens)
    def forward(self, x):
        t = x.shape[1]
        x = self.token_emb(x) + self.pos_emb(torch.arange(t))
        x = torch.cat([x, x], dim=-1)
        for layer in self.layers:
            x = layer(x)
        x = torch.stack(x.chunk(2, dim=-1)).mean(dim=0)
        return self.out(self.norm(x))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = ReformerLM(VOCAB, WIDTH, DEPTH, SEQ, bucket_size=BUCKET)
        load_params(NAME, self.model)
        with torch.no_grad():
            for name, b in self.model.named_buffers():
                b.copy_(torch.from_numpy(rng(NAME, name).standard_normal(tuple(b.shape)).astype(np.float32)))
        self.fwd = compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)

    def step(self) -> float:
        half = self.r.integers(0, VOCAB, (BATCH, SEQ // 2 + 1))
        seq = torch.from_numpy(np.concatenate([half, half], axis=1))
        x, y = seq[:, :SEQ], seq[:, 1:SEQ + 1]
        logits = self.fwd(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
