from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# a causal LM with ALiBi as the paper's fairseq code and its ports write it: no position
# embeddings, head slopes from get_slopes (a geometric sequence, interleaved for head
# counts that are not powers of two), a bias slope * (j - i) plus a causal -inf mask from
# torch.triu, added as a float attn_mask to F.scaled_dot_product_attention; trained on
# random-length chunks (the length changes every step: dynamic), gradient accumulation of
# 2, a cosine schedule with warmup by LambdaLR, clip_grad_norm_, AdamW; then perplexity on
# a longer sequence than any seen in training (ALiBi's extrapolation)
def get_slopes(n):
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])
class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    def forward(self, x, alibi):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp(self.ln2(x))
class ALiBiLM(nn.Module):
    def __init__(self, vocab=40, d=48, n_head=6, n_layer=2):
        super().__init__()
        self.n_head = n_head
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight   # tied
        self.register_buffer("slopes", torch.Tensor(get_slopes(n_head)), persistent=False)
    def alibi(self, T):
        pos = torch.arange(T)
        rel = (pos[None, :] - pos[:, None]).float()                        # j - i, <= 0 below the diagonal
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        return self.slopes[:, None, None] * rel[None] + causal[None]          # (heads, T, T)
    def forward(self, idx, targets=None):
        x = self.wte(idx)
        alibi = self.alibi(idx.size(1)).unsqueeze(0)
        for block in self.blocks:
            x = block(x, alibi)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss
r = np.random.default_rng(0)
data = torch.from_numpy((np.cumsum(r.integers(0, 3, 4000)) % 40).astype(np.int64))   # a learnable stream
model = ALiBiLM(); sync(model)
net = comp(model)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=3e-3, betas=(0.9, 0.95))
warmup, total, accum = 2, 8, 2
def lr_lambda(step):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
LOSSES = []
model.train()
for it in range(total):
    for micro in range(accum):
        T = int(r.integers(12, 25))
        ix = r.integers(0, len(data) - T - 1, 4)
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        _, loss = net(x, y)
        (loss / accum).backward()
        LOSSES.append(loss.item())
    LOSSES.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
    optimizer.step(); scheduler.step(); optimizer.zero_grad(set_to_none=True)
model.eval()
with torch.no_grad():
    x = data[:41].unsqueeze(0)
    logits, loss = net(x[:, :-1], x[:, 1:])
    LOSSES += [math.exp(loss.item()), logits[0, -1].softmax(-1).max().item()]
