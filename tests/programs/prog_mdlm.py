from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A masked diffusion language model (MDLM / LLaDA style): a bidirectional Llama-like
# Transformer (RMSNorm written by hand, rotary embeddings from a cached cos/sin buffer,
# SwiGLU, F.scaled_dot_product_attention without a causal mask) trained on the forward
# process: each sequence masked with its own ratio t, the loss the masked tokens'
# cross-entropy picked by boolean indexing and weighted by 1/t; then LLaDA's semi-
# autoregressive sampler under no_grad: blocks of masked positions filled over a few steps,
# each step keeping the most confident predictions (float64 softmax, gather, topk with k
# read from a tensor of tokens to transfer, writes through boolean masks)
VOCAB, MASK_ID = 33, 32
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
    def forward(self, x):
        x_fp32 = x.float()
        out = x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight
class Rotary(nn.Module):
    def __init__(self, dim, max_len=64, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_len).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)
    def forward(self, q, k):
        T = q.shape[-2]
        cos, sin = self.cos_cached[:, :, :T], self.sin_cached[:, :, :T]
        def rotate_half(x):
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((-x2, x1), dim=-1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
class Block(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.attn_norm, self.ff_norm = RMSNorm(d), RMSNorm(d)
        self.q_proj = nn.Linear(d, d, bias=False); self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False); self.attn_out = nn.Linear(d, d, bias=False)
        self.ff_proj = nn.Linear(d, 2 * 48, bias=False); self.ff_out = nn.Linear(48, d, bias=False)
        self.rotary = Rotary(d // n_heads)
    def forward(self, x):
        B, T, C = x.shape
        h = self.attn_norm(x)
        q, k, v = (p(h).view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = self.rotary(q, k)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
        x = x + self.attn_out(att.transpose(1, 2).contiguous().view(B, T, C))
        gate_up = self.ff_proj(self.ff_norm(x))
        x_, gate = gate_up.chunk(2, dim=-1)
        return x + self.ff_out(F.silu(gate) * x_)
class MaskedDiffusionLM(nn.Module):
    def __init__(self, d=32, n_heads=4, n_layers=2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList([Block(d, n_heads) for _ in range(n_layers)])
        self.ln_f = RMSNorm(d)
        self.ff_out = nn.Linear(d, VOCAB, bias=False)
    def forward(self, input_ids):
        x = self.wte(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.ff_out(self.ln_f(x))
r = np.random.default_rng(0)
motifs = r.integers(0, 32, size=(4, 8))
def sequences(b, length=24):
    rows = [np.concatenate([motifs[r.integers(4)] for _ in range(length // 8)]) for _ in range(b)]
    return torch.from_numpy(np.stack(rows))
def forward_process(input_ids, eps=1e-3):
    b, l = input_ids.shape
    t = torch.from_numpy(r.random(b).astype(np.float32))     # torch.rand(b) in the reference
    p_mask = (1 - eps) * t + eps
    p_mask = p_mask[:, None].repeat(1, l)
    masked_indices = torch.from_numpy(r.random((b, l)).astype(np.float32)) < p_mask
    noisy_batch = torch.where(masked_indices, MASK_ID, input_ids)
    return noisy_batch, masked_indices, p_mask
model = MaskedDiffusionLM(); sync(model)
fwd = comp(model, fullgraph=True)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
LOSSES = []
for step in range(8):
    input_ids = sequences(8)
    noisy_batch, masked_indices, p_mask = forward_process(input_ids)
    logits = fwd(noisy_batch)
    token_loss = F.cross_entropy(logits[masked_indices], input_ids[masked_indices], reduction="none") / p_mask[masked_indices]
    loss = token_loss.sum() / (input_ids.shape[0] * input_ids.shape[1])
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base = mask_num // steps
    remainder = mask_num % steps
    num_transfer_tokens = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, :remainder[i]] += 1
    return num_transfer_tokens
@torch.no_grad()
def generate(model, prompt, steps=4, gen_length=16, block_length=8, mask_id=MASK_ID):
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt.clone()
    num_blocks = gen_length // block_length
    steps = steps // num_blocks
    for num_block in range(num_blocks):
        lo, hi = prompt.shape[1] + num_block * block_length, prompt.shape[1] + (num_block + 1) * block_length
        block_mask_index = (x[:, lo:hi] == mask_id)
        num_transfer_tokens = get_num_transfer_tokens(block_mask_index, steps)
        for i in range(steps):
            mask_index = (x == mask_id)
            logits = model(x)
            x0 = torch.argmax(logits, dim=-1)
            p = F.softmax(logits.to(torch.float64), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, hi:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -np.inf)
            transfer_index = torch.zeros_like(x0, dtype=torch.bool, device=x0.device)
            for j in range(confidence.shape[0]):
                _, select_index = torch.topk(confidence[j], k=num_transfer_tokens[j, i])
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
    return x
model.eval()
out = generate(fwd, sequences(2, 8))
LOSSES += [float(t) for t in out[:, 8:].flatten().tolist()]
with torch.no_grad():
    ids = sequences(4)
    noisy, masked, p_mask = forward_process(ids)
    logits = fwd(noisy)
    LOSSES.append((F.cross_entropy(logits[masked], ids[masked], reduction="none") / p_mask[masked]).sum().item() / ids.numel())
