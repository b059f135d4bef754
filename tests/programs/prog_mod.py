from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Mixture-of-Depths (Raposo et al.; the small open reimplementations' shape): every other
# block of a GPT routes only the top capacity * T tokens of each sequence through attention
# and MLP: a Linear router scores tokens, topk(sorted=False) picks them, the indices sorted
# back into time order (the scores reordered by gather) so causal attention among the picked
# tokens stays causal, the block's update scaled by the router weight and scatter_add'ed into
# the residual stream; an auxiliary BCE trains the router to predict its own top-k (targets
# by scatter of ones) for autoregressive use. Tied embeddings, cosine LR with warmup by hand,
# AdamW with no decay on norms/biases, clip_grad_norm_; evaluated at a shorter context
class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d); self.c_proj = nn.Linear(d, d)
        self.n_head = n_head
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d); self.attn = CausalSelfAttention(d, n_head)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
    def update(self, x):              # the residual update alone, for routing
        h = self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(x + h))
    def forward(self, x):
        return x + self.update(x)
class MoDBlock(nn.Module):
    def __init__(self, d, n_head, capacity=0.5):
        super().__init__()
        self.block = Block(d, n_head)
        self.router = nn.Linear(d, 1, bias=False)
        self.capacity = capacity
        self.aux_loss = None
    def forward(self, x):
        b, s, d = x.shape
        k = max(1, int(self.capacity * s))
        router_logits = self.router(x).squeeze(-1)                    # (b, s)
        weights, selected = torch.topk(router_logits, k, dim=1, sorted=False)
        selected, index = torch.sort(selected, dim=1)
        weights = torch.gather(weights, dim=1, index=index)
        gather_index = selected.unsqueeze(-1).expand(-1, -1, d)
        picked = torch.gather(x, dim=1, index=gather_index)
        update = self.block.update(picked) * torch.sigmoid(weights).unsqueeze(-1)
        out = torch.scatter_add(x, dim=1, index=gather_index, src=update)
        targets = torch.zeros_like(router_logits).scatter(1, selected, 1.0)
        self.aux_loss = F.binary_cross_entropy_with_logits(router_logits, targets)
        return out
class MoDGPT(nn.Module):
    def __init__(self, vocab=48, block_size=32, d=32, n_head=4, n_layer=4):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d), wpe=nn.Embedding(block_size, d),
            h=nn.ModuleList([MoDBlock(d, n_head) if i % 2 else Block(d, n_head) for i in range(n_layer)]),
            ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        aux = []
        for block in self.transformer.h:
            x = block(x)
            if isinstance(block, MoDBlock):
                aux.append(block.aux_loss)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss + 0.1 * torch.stack(aux).mean()
model = MoDGPT(); sync(model)
fwd = comp(model, fullgraph=True)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=3e-3, betas=(0.9, 0.95))
def get_lr(it, warmup=2, max_iters=8, lr=3e-3, min_lr=3e-4):
    if it < warmup:
        return lr * (it + 1) / warmup
    ratio = (it - warmup) / (max_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)
r = np.random.default_rng(0)
data = torch.from_numpy(np.tile(r.integers(0, 48, 13), 40))
LOSSES = []
for it in range(8):
    for g in opt.param_groups:
        g["lr"] = get_lr(it)
    ix = r.integers(0, len(data) - 33, 8)
    x = torch.stack([data[i:i + 32] for i in ix]); y = torch.stack([data[i + 1:i + 33] for i in ix])
    _, loss = fwd(x, y)
    opt.zero_grad(set_to_none=True); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    x = data[5:21].view(1, 16).repeat(2, 1); y = data[6:22].view(1, 16).repeat(2, 1)
    logits, loss = fwd(x, y)
    LOSSES += [loss.item(), logits.argmax(-1).eq(y).float().mean().item()]
