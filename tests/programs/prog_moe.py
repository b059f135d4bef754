from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class MoE(nn.Module):
    def __init__(s, d=16, n=4, k=2):
        super().__init__(); s.k = k; s.gate = nn.Linear(d, n, bias=False)
        s.experts = nn.ModuleList([nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d)) for _ in range(n)])
    def forward(s, x):
        B, T, D = x.shape; x = x.view(-1, D)
        logits = s.gate(x); probs = F.softmax(logits, dim=-1, dtype=torch.float)
        w, idx = torch.topk(probs, s.k, dim=-1); w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(idx, num_classes=len(s.experts)).permute(2, 1, 0)
        for e, expert in enumerate(s.experts):
            ki, tok = torch.where(mask[e])
            if tok.numel() == 0: continue
            cur = expert(x[tok]) * w[tok, ki, None]
            out.index_add_(0, tok, cur.to(x.dtype))
        aux = (probs.mean(0) * mask.float().sum((1, 2)) / x.shape[0]).sum() * len(s.experts)
        return out.view(B, T, D), aux
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(50, 16); s.moe = MoE(); s.norm = nn.RMSNorm(16); s.head = nn.Linear(16, 50)
    def forward(s, t):
        h = s.emb(t); o, aux = s.moe(s.norm(h)); return s.head(h + o), aux
m = M(); sync(m)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3); r = np.random.default_rng(0); LOSSES = []
for i in range(3):
    t = torch.from_numpy(r.integers(0, 50, (4, 8)))
    logits, aux = m(t)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), t[:, 1:].reshape(-1)) + 0.01 * aux
    opt.zero_grad(); loss.backward(); opt.step(); LOSSES.append(loss.item())
