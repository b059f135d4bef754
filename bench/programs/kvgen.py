"""GPT-2 sampling with a key/value cache, as the GPT-2 PyTorch ports write it.

A 4-layer GPT-2 (width 128, 4 heads, vocabulary 65, tied head) whose attention returns its
keys and values as ``present`` and takes them back as ``layer_past`` (``torch.cat`` along
time); positions by ``arange(past_length, past_length + t)``. A step is one generation
under ``torch.no_grad()``: a 16-token prompt for 4 sequences, then 32 tokens one at a
time, each drawn by ``torch.multinomial`` from the top-k softmax (k=1: the same tokens in
every framework). The step's "loss": the mean log-probability of the last tokens drawn.
Compiled: the model, called 33 times a step with a cache that grows by one each call.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from .common import load_params, rng

NAME = "kvgen"
VOCAB, N_CTX, N_EMBD, N_HEAD, N_LAYER = 65, 64, 128, 4, 4
BATCH, PROMPT, NEW = 4, 16, 32


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(N_CTX, N_CTX)).view(1, 1, N_CTX, N_CTX),
                             persistent=False)

    def split_heads(self, x):
        return x.view(x.size()[:-1] + (N_HEAD, x.size(-1) // N_HEAD)).permute(0, 2, 1, 3)

    def forward(self, x, layer_past=None):
        query, key, value = self.c_attn(x).split(N_EMBD, dim=2)
        query, key, value = self.split_heads(query), self.split_heads(key), self.split_heads(value)
        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim=-2)
            value = torch.cat((layer_past[1], value), dim=-2)
        present = torch.stack((key, value))
        w = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(value.size(-1))
        nd, ns = w.size(-2), w.size(-1)
        b = self.bias[:, :, ns - nd:ns, :ns]
        w = w * b - 1e10 * (1 - b)
        a = torch.matmul(F.softmax(w, dim=-1), value)
        a = a.permute(0, 2, 1, 3).contiguous()
        return self.c_proj(a.view(a.size()[:-2] + (N_EMBD,))), present


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(N_EMBD), Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.c_fc, self.c_proj = nn.Linear(N_EMBD, 4 * N_EMBD), nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x, layer_past=None):
        a, present = self.attn(self.ln_1(x), layer_past=layer_past)
        x = x + a
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")), present


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, N_EMBD), nn.Embedding(N_CTX, N_EMBD)
        self.h = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, past=None):
        past_length = 0 if past is None else past[0][0].size(-2)
        past = [None] * len(self.h) if past is None else past
        position_ids = torch.arange(past_length, input_ids.size(-1) + past_length, dtype=torch.long)
        hidden = self.wte(input_ids) + self.wpe(position_ids.unsqueeze(0).expand_as(input_ids))
        presents = []
        for block, layer_past in zip(self.h, past):
            hidden, present = block(hidden, layer_past)
            presents.append(present)
        return self.lm_head(self.ln_f(hidden)), presents


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.prompt = torch.from_numpy(r.integers(0, VOCAB, (BATCH, PROMPT)))
        self.model = GPT2()
        load_params(NAME, self.model)
        self.model.eval()
        self.forward = compile(self.model)

    def step(self) -> float:
        prev, past, top_k = self.prompt, None, 1
        with torch.no_grad():
            for _ in range(NEW):
                logits, past = self.forward(prev, past=past)
                raw = logits[:, -1, :]
                logits = raw / 0.8
                v, _ = torch.topk(logits, top_k)
                logits = torch.where(logits < v[:, [-1]], torch.full_like(logits, -1e10), logits)
                probs = F.softmax(logits, dim=-1)
                prev = torch.multinomial(probs, num_samples=1)
        return F.log_softmax(raw, dim=-1).gather(1, prev).mean().item()
