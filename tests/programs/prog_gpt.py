from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn
from torch.nn import functional as F
torch.manual_seed(0)
class CausalSelfAttention(nn.Module):
    def __init__(s, n_embd, n_head):
        super().__init__()
        s.c_attn = nn.Linear(n_embd, 3 * n_embd); s.c_proj = nn.Linear(n_embd, n_embd)
        s.n_head = n_head; s.n_embd = n_embd
        s.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))
    def forward(s, x):
        B, T, C = x.size()
        q, k, v = s.c_attn(x).split(s.n_embd, dim=2)
        k = k.view(B, T, s.n_head, C // s.n_head).transpose(1, 2)
        q = q.view(B, T, s.n_head, C // s.n_head).transpose(1, 2)
        v = v.view(B, T, s.n_head, C // s.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(s.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = 0.5 * (y + y2)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return s.c_proj(y)
class Block(nn.Module):
    def __init__(s, n_embd, n_head):
        super().__init__()
        s.ln_1 = nn.LayerNorm(n_embd); s.attn = CausalSelfAttention(n_embd, n_head)
        s.ln_2 = nn.LayerNorm(n_embd)
        s.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(n_embd, 4 * n_embd), c_proj=nn.Linear(4 * n_embd, n_embd), act=nn.GELU(approximate='tanh')))
        m = s.mlp; s.mlpf = lambda x: m.c_proj(m.act(m.c_fc(x)))
    def forward(s, x):
        x = x + s.attn(s.ln_1(x)); x = x + s.mlpf(s.ln_2(x)); return x
class GPT(nn.Module):
    def __init__(s, vocab=65, n_embd=32, n_head=4, n_layer=2):
        super().__init__()
        s.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(16, n_embd),
            drop=nn.Dropout(0.0), h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        s.lm_head = nn.Linear(n_embd, vocab, bias=False)
        s.transformer.wte.weight = s.lm_head.weight
        s.apply(s._init_weights)
        for pn, p in s.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
    def _init_weights(s, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None: torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
    def forward(s, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = s.transformer.drop(s.transformer.wte(idx) + s.transformer.wpe(pos))
        for block in s.transformer.h: x = block(x)
        x = s.transformer.ln_f(x)
        logits = s.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss
    @torch.no_grad()
    def generate(s, idx, n, temperature=1.0, top_k=None):
        for _ in range(n):
            idx_cond = idx if idx.size(1) <= 16 else idx[:, -16:]
            logits, _ = s(idx_cond, torch.zeros_like(idx_cond))
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
model = GPT(); sync(model)
decay, no_decay = [], []
for n, p in model.named_parameters():
    (decay if p.dim() >= 2 else no_decay).append(p)
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95))
r = np.random.default_rng(0)
data = torch.from_numpy(r.integers(0, 65, size=(2000,)).astype(np.int64))
fwd = comp(model)
LOSSES = []
for it in range(4):
    ix = r.integers(0, len(data) - 16, size=(8,))
    x = torch.stack([data[i:i+16] for i in ix]); y = torch.stack([data[i+1:i+17] for i in ix])
    logits, loss = fwd(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    LOSSES.append(loss.item())
model.eval()
out = model.generate(torch.zeros((1, 1), dtype=torch.long), 5, top_k=10)
assert out.shape == (1, 6)
