from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Switch Transformer LM: top-1 routing in float32 with a capacity factor (each token's
# place in its expert's queue by a cumsum over the one-hot choice, overflowing tokens
# dropped to the residual), dispatch into an (experts * capacity) buffer by scatter_add_,
# experts as batched weights applied by bmm, the combine by indexing the buffer at each
# token's slot; the load-balancing and router z-losses kept on the layer as attributes and
# summed over modules() into the loss; causal attention by F.scaled_dot_product_attention;
# expert loads by bincount under no_grad; Adam with an inverse-square-root schedule
class SwitchFFN(nn.Module):
    def __init__(self, d, d_ff, n_experts=4, capacity_factor=1.25):
        super().__init__()
        self.n_experts, self.capacity_factor = n_experts, capacity_factor
        self.router = nn.Linear(d, n_experts, bias=False)
        self.wi = nn.Parameter(torch.randn(n_experts, d, d_ff) * d ** -0.5)
        self.wo = nn.Parameter(torch.randn(n_experts, d_ff, d) * d_ff ** -0.5)
        self.aux_loss = self.z_loss = None
    def forward(self, x):
        B, T, D = x.shape
        E = self.n_experts
        tokens = x.reshape(-1, D)
        capacity = int(self.capacity_factor * tokens.shape[0] / E)
        logits = self.router(tokens.float())
        probs = torch.softmax(logits, dim=-1)
        gate, expert = probs.max(dim=-1)
        onehot = F.one_hot(expert, E)
        position = (torch.cumsum(onehot, dim=0) * onehot).sum(dim=-1) - 1
        keep = position < capacity
        slot = expert * capacity + position.clamp(max=capacity - 1)
        buf = tokens.new_zeros(E * capacity, D)
        buf.scatter_add_(0, slot[:, None].expand(-1, D), tokens * keep[:, None].to(tokens.dtype))
        h = torch.bmm(F.relu(torch.bmm(buf.view(E, capacity, D), self.wi)), self.wo)
        out = h.reshape(E * capacity, D)[slot] * (gate * keep).unsqueeze(-1).to(x.dtype)
        self.aux_loss = E * torch.sum(onehot.float().mean(0) * probs.mean(0))
        self.z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
        self.last_expert = expert.detach()
        return out.view(B, T, D)
class Block(nn.Module):
    def __init__(self, d, n_heads, moe):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ffn = SwitchFFN(d, 2 * d) if moe else nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.ffn(self.ln2(x))
class SwitchLM(nn.Module):
    def __init__(self, vocab=24, d=16, n_heads=2, n_layers=2, max_len=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([Block(d, n_heads, moe=i % 2 == 1) for i in range(n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
model = SwitchLM(); sync(model)
fwd = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.98))
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) ** -0.5, (s + 1) * 2 ** -1.5))
r = np.random.default_rng(0)
def data(n, T=12):
    start = r.integers(0, 24, (n, 1))
    seq = (start + np.arange(T + 1) * r.integers(1, 3, (n, 1))) % 24
    return torch.from_numpy(seq[:, :-1]), torch.from_numpy(seq[:, 1:])
LOSSES = []
for step in range(5):
    x, y = data(4)
    logits, ce = fwd(x, y)
    moes = [m for m in model.modules() if isinstance(m, SwitchFFN)]
    aux = sum(m.aux_loss for m in moes)
    z = sum(m.z_loss for m in moes)
    loss = ce + 1e-2 * aux + 1e-3 * z
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [ce.item(), aux.item(), z.item()]
    with torch.no_grad():
        LOSSES += torch.bincount(moes[0].last_expert, minlength=4).tolist()
model.eval()
with torch.no_grad():
    x, y = data(3)
    logits = fwd(x)
    LOSSES += [F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()] + logits[:, -1].flatten().tolist()
