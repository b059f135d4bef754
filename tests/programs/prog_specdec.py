from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from torch.nn import functional as F
torch.manual_seed(0)
# speculative decoding as the minimal reimplementations write it: a small draft GPT and a
# larger target GPT (nanoGPT blocks, a (k, v) cache per layer grown by torch.cat and cut
# back to the accepted length after each round), gamma tokens drafted one at a time by
# torch.multinomial on the top-k softmax of logits / temperature, verified by one target
# call, accepted while torch.rand() < p / q, the first rejection resampled from
# clamp(p - q, min=0) renormalized. Both models compiled; top_k=1 makes every draw and
# acceptance exact (the frameworks' random generators differ), and the speculative output
# must then equal the target's own greedy decoding
class GPTConfig:
    def __init__(self, n_layer, n_head, n_embd, vocab_size=48, block_size=96):
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.vocab_size, self.block_size = vocab_size, block_size
class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head, self.n_embd = config.n_head, config.n_embd
    def forward(self, x, kv_cache=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if kv_cache is not None:
            k = torch.cat([kv_cache[0], k], dim=2)
            v = torch.cat([kv_cache[1], v], dim=2)
        L = k.size(2)
        # the new queries sit at positions L - T .. L - 1
        mask = torch.ones(T, L, dtype=torch.bool, device=x.device).tril(diagonal=L - T)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)
class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd); self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd), nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd))
    def forward(self, x, kv_cache=None):
        a, cache = self.attn(self.ln_1(x), kv_cache)
        x = x + a
        return x + self.mlp(self.ln_2(x)), cache
class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
    def forward(self, idx, kv_caches=None):
        B, T = idx.size()
        past = 0 if kv_caches is None else kv_caches[0][0].size(2)
        pos = torch.arange(past, past + T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        new_caches = []
        for i, block in enumerate(self.transformer.h):
            x, c = block(x, None if kv_caches is None else kv_caches[i])
            new_caches.append(c)
        return self.lm_head(self.transformer.ln_f(x)), new_caches
def norm_logits(logits, temperature, top_k):
    logits = logits / temperature
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits = logits.masked_fill(logits < v[..., [-1]], float("-inf"))
    return F.softmax(logits, dim=-1)
def crop(caches, length):
    return [(k[:, :, :length], v[:, :, :length]) for k, v in caches]
@torch.inference_mode()
def speculative_generate(target, draft, prefix, max_new_tokens, gamma=4, temperature=1.0, top_k=None):
    seq = prefix
    # the caches hold every token but the last, which each round feeds first
    _, t_cache = target(seq[:, :-1])
    _, d_cache = draft(seq[:, :-1])
    accepted = 0
    while seq.size(1) < prefix.size(1) + max_new_tokens:
        n0 = seq.size(1)
        tok, qs, drafted = seq[:, -1:], [], []
        for _ in range(gamma):
            logits, d_cache = draft(tok, d_cache)
            q = norm_logits(logits[:, -1], temperature, top_k)
            tok = torch.multinomial(q, num_samples=1)
            qs.append(q); drafted.append(tok)
        drafted = torch.cat(drafted, dim=1)
        logits, t_cache = target(torch.cat([seq[:, -1:], drafted], dim=1), t_cache)
        p = norm_logits(logits, temperature, top_k)          # (1, gamma + 1, V)
        n = gamma
        for i in range(gamma):
            x = drafted[0, i]
            r = torch.rand(1, device=p.device)
            if r < p[0, i, x] / qs[i][0, x]:
                continue
            n = i
            break
        accepted += n
        if n < gamma:
            resid = torch.clamp(p[:, n] - qs[n], min=0)
            nxt = torch.multinomial(resid / resid.sum(dim=-1, keepdim=True), num_samples=1)
        else:
            nxt = torch.multinomial(p[:, gamma], num_samples=1)
            _, d_cache = draft(drafted[:, -1:], d_cache)   # the draft never saw its last token
        seq = torch.cat([seq, drafted[:, :n], nxt], dim=1)
        t_cache, d_cache = crop(t_cache, n0 + n), crop(d_cache, n0 + n)
    return seq[:, :prefix.size(1) + max_new_tokens], accepted
@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    logits, cache = model(idx)
    for _ in range(max_new_tokens):
        probs = norm_logits(logits[:, -1], temperature, top_k)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
        logits, cache = model(idx_next, cache)
    return idx
target = GPT(GPTConfig(n_layer=3, n_head=4, n_embd=48)); draft = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16))
sync(target, draft)
r = np.random.default_rng(0)
# a text with structure both models can learn a little of: a repeating phrase with noise
phrase = r.integers(0, 48, size=(17,))
data = np.tile(phrase, 40)
flip = r.random(data.shape) < 0.1
data = torch.from_numpy(np.where(flip, r.integers(0, 48, size=data.shape), data))
t_fwd, d_fwd = comp(target), comp(draft)
LOSSES = []
for model, fwd in ((target, t_fwd), (draft, d_fwd)):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    model.train()
    for it in range(4):
        ix = r.integers(0, len(data) - 33, size=(4,))
        x = torch.stack([data[i:i + 32] for i in ix]); y = torch.stack([data[i + 1:i + 33] for i in ix])
        logits, _ = fwd(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        LOSSES.append(loss.item())
    model.eval()
prompt = data[100:108].unsqueeze(0)
out, accepted = speculative_generate(t_fwd, d_fwd, prompt, 40, gamma=4, temperature=0.8, top_k=1)
greedy = generate(t_fwd, prompt, 40, temperature=0.8, top_k=1)
assert out.shape == (1, 48) and torch.equal(out, greedy), (out, greedy)
LOSSES += [float(t) for t in out[0, 8:].tolist()] + [float(accepted)]
# sampled for real: only what any draw must satisfy
out, accepted = speculative_generate(t_fwd, d_fwd, prompt, 40, gamma=4, temperature=1.0, top_k=10)
assert out.shape == (1, 48) and int(out.min()) >= 0 and int(out.max()) < 48 and 0 <= accepted <= 40
assert torch.equal(out[:, :8], prompt)
