"""A character-level GPT, as nanoGPT's model.py and train.py write it.

Token and position embeddings, 4 pre-norm Transformer blocks (LayerNorm, a fused ``c_attn``
projection split into q, k, v, ``F.scaled_dot_product_attention`` with ``is_causal`` where
the framework has it, else the masked softmax, a tanh-GELU MLP), a final LayerNorm and an
``lm_head`` tied to the token embedding; ``F.cross_entropy`` over the logits; AdamW with
weight decay on the matrices only, ``clip_grad_norm_(1.0)``. Vocabulary 65 (Shakespeare's
characters), context 64, width 128, 4 heads, batch 16. Compiled: the model.
"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F

from .common import load_params, rng

NAME = "gpt"
VOCAB, BLOCK, N_LAYER, N_HEAD, N_EMBD, BATCH = 65, 64, 4, 4, 128, 16


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.n_head, self.n_embd = N_HEAD, N_EMBD
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=nn.LayerNorm(N_EMBD),
        ))
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [{"params": decay_params, "weight_decay": weight_decay},
                        {"params": nodecay_params, "weight_decay": 0.0}]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        data = r.integers(0, VOCAB, 20000)
        self.batches = []
        for _ in range(4):
            ix = r.integers(0, len(data) - BLOCK, BATCH)
            x = torch.stack([torch.from_numpy(data[i:i + BLOCK]) for i in ix])
            y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK]) for i in ix])
            self.batches.append((x, y))
        self.model = GPT()
        load_params(NAME, self.model)
        self.optimizer = self.model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        X, Y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        logits, loss = self.forward(X, Y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()
