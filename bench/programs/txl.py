"""A Transformer-XL training step (kimiyoung/transformer-xl's MemTransformerLM, small).

Segment-level recurrence: each layer's input of the previous segment, detached, is
concatenated before the segment's keys and values (memories start as empty 1-D tensors);
relative positional attention with learned r_w / r_r biases, einsum scores and the
pad-and-view rel_shift; a causal mask over memory and segment tested by
``mask.any().item()``; adaptive softmax (cutoffs 200 and 500 of 1000 words). 3 layers of
width 128 (4 heads of 32), segments of 32 tokens over batch 8, 32 memories, Adam and
clip_grad_norm_. Compiled: the model (memories in, new memories out).
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "txl"
VOCAB, LAYERS, D, HEADS, DH, INNER, TGT, MEM, BATCH = 1000, 3, 128, 4, 32, 256, 32, 32, 8


class RelLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_net = nn.Linear(D, 3 * HEADS * DH, bias=False)
        self.r_net = nn.Linear(D, HEADS * DH, bias=False)
        self.o_net = nn.Linear(HEADS * DH, D, bias=False)
        self.layer_norm = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, INNER), nn.ReLU(inplace=True), nn.Linear(INNER, D))
        self.ff_norm = nn.LayerNorm(D)

    @staticmethod
    def _rel_shift(x):
        zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), device=x.device, dtype=x.dtype)
        x_padded = torch.cat([zero_pad, x], dim=1).view(x.size(1) + 1, x.size(0), *x.size()[2:])
        return x_padded[1:].view_as(x)

    def forward(self, w, r, r_w_bias, r_r_bias, attn_mask, mems):
        qlen, rlen, bsz = w.size(0), r.size(0), w.size(1)
        w_heads = self.qkv_net(torch.cat([mems, w], 0))
        r_head_k = self.r_net(r).view(rlen, HEADS, DH)
        q, k, v = torch.chunk(w_heads, 3, dim=-1)
        q = q[-qlen:].view(qlen, bsz, HEADS, DH)
        k, v = k.view(-1, bsz, HEADS, DH), v.view(-1, bsz, HEADS, DH)
        AC = torch.einsum('ibnd,jbnd->ijbn', (q + r_w_bias, k))
        BD = self._rel_shift(torch.einsum('ibnd,jnd->ijbn', (q + r_r_bias, r_head_k)))
        score = (AC + BD) * (1 / DH ** 0.5)
        if attn_mask is not None and attn_mask.any().item():
            score = score.float().masked_fill(attn_mask[:, :, :, None], -float('inf')).type_as(score)
        prob = F.softmax(score, dim=1)
        vec = torch.einsum('ijbn,jbnd->ibnd', (prob, v)).contiguous().view(qlen, bsz, HEADS * DH)
        out = self.layer_norm(w + self.o_net(vec))
        return self.ff_norm(out + self.ff(out))


class MemTransformerLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([RelLayer() for _ in range(LAYERS)])
        self.r_w_bias = nn.Parameter(torch.zeros(HEADS, DH))
        self.r_r_bias = nn.Parameter(torch.zeros(HEADS, DH))
        self.crit = nn.AdaptiveLogSoftmaxWithLoss(D, VOCAB, cutoffs=[200, 500], div_value=2.0)
        self.register_buffer('inv_freq', 1 / (10000 ** (torch.arange(0.0, D, 2.0) / D)))

    def forward(self, data, target, *mems):
        if not mems:
            mems = [torch.empty(0) for _ in range(LAYERS + 1)]
        qlen, bsz = data.size()
        mlen = mems[0].size(0)
        klen = mlen + qlen
        core = self.word_emb(data) * D ** 0.5
        mask = torch.triu(core.new_ones(qlen, klen), diagonal=1 + mlen).byte()[:, :, None].bool()
        pos_seq = torch.arange(klen - 1, -1, -1.0, dtype=core.dtype)
        sinusoid = torch.ger(pos_seq, self.inv_freq)
        pos_emb = torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1)[:, None, :]
        hids = [core]
        for i, layer in enumerate(self.layers):
            core = layer(core, pos_emb, self.r_w_bias, self.r_r_bias, mask, mems[i])
            hids.append(core)
        with torch.no_grad():
            end = mlen + qlen
            new_mems = [torch.cat([m, h], 0)[max(0, end - MEM):end].detach() for m, h in zip(mems, hids)]
        loss = self.crit(core.reshape(-1, D), target.reshape(-1)).loss
        return [loss] + new_mems


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.model = MemTransformerLM()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=2.5e-4)
        corpus = (r.zipf(1.2, BATCH * TGT * 8 + 1) % VOCAB).astype(np.int64)
        data = torch.from_numpy(corpus[:BATCH * TGT * 8]).view(BATCH, -1).t().contiguous()
        self.segments = [(data[i:i + TGT], torch.roll(data, -1, 0)[i:i + TGT]) for i in range(0, 8 * TGT, TGT)]
        self.i, self.mems = 0, ()

    def step(self) -> float:
        data, target = self.segments[self.i % len(self.segments)]
        if self.i % len(self.segments) == 0:
            self.mems = ()
        self.i += 1
        ret = self.forward(data, target, *self.mems)
        loss, self.mems = ret[0], ret[1:]
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        return loss.item()
