"""A Mixture-of-Depths GPT (Raposo et al.), routing as the small open reimplementations do.

nanoGPT blocks (LayerNorm, causal ``scaled_dot_product_attention``, GELU MLP), 4 layers of
width 128, every other one a Mixture-of-Depths block: a Linear router scores the tokens,
``topk(sorted=False)`` keeps half of each sequence, the indices are sorted back into time
order (the scores reordered by ``gather``), the kept tokens gathered, run through the block
and their update, scaled by the sigmoid of their score, ``scatter_add``'ed into the
residual stream; an auxiliary BCE teaches the router its own top-k (targets by
``scatter``). Vocabulary 256, batch 16 of 64 tokens, tied embeddings, AdamW. Compiled: the
model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "mod"
VOCAB, DIM, HEADS, LAYERS, BATCH, SEQ, CAPACITY = 256, 128, 4, 4, 16, 64, 0.5


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.c_attn, self.c_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(approximate="tanh"), nn.Linear(4 * DIM, DIM))

    def update(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return h + self.mlp(self.ln_2(x + h))

    def forward(self, x):
        return x + self.update(x)


class MoDBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.router = nn.Linear(DIM, 1, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        router_logits = self.router(x).squeeze(-1)
        weights, selected = torch.topk(router_logits, int(CAPACITY * s), dim=1, sorted=False)
        selected, index = torch.sort(selected, dim=1)
        weights = torch.gather(weights, dim=1, index=index)
        gather_index = selected.unsqueeze(-1).expand(-1, -1, d)
        update = self.block.update(torch.gather(x, 1, gather_index)) * torch.sigmoid(weights).unsqueeze(-1)
        targets = torch.zeros_like(router_logits).scatter(1, selected, 1.0)
        aux = F.binary_cross_entropy_with_logits(router_logits, targets)
        return torch.scatter_add(x, 1, gather_index, update), aux


class MoDGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
        self.h = nn.ModuleList([MoDBlock() if i % 2 else Block() for i in range(LAYERS)])
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        aux = []
        for block in self.h:
            if isinstance(block, MoDBlock):
                x, a = block(x)
                aux.append(a)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)) + 0.1 * torch.stack(aux).mean()


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        data = torch.from_numpy(r.integers(0, VOCAB, BATCH * (SEQ + 1)).reshape(BATCH, SEQ + 1))
        self.x, self.y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        self.model = MoDGPT()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4)

    def step(self) -> float:
        loss = self.forward(self.x, self.y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()
