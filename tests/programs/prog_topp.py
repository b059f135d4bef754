from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A NoPE decoder LM (no position embeddings: causal scaled_dot_product_attention only)
# with RMSNorm and SwiGLU, AdamW param groups (no decay for norms and biases), gradient
# accumulation over micro-batches; generation under inference_mode as transformers'
# logits processors write it: a repetition penalty (gather, where, scatter_), a minimum
# length suppressing EOS, temperature, top-k by topk's last value, top-p by sort, cumsum
# of the softmax and the removal mask scattered back to vocabulary order; the processors
# compiled fullgraph=True apart from the model, the context cropped to the block size
# (dynamic=True); tokens drawn by inverse-CDF from shared uniforms (the frameworks'
# generators differ)
VOCAB, BLOCK, EOS = 16, 12, 0
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)
    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).contiguous().view(B, T, C))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))
class NoPELM(nn.Module):
    def __init__(self, dim=16, heads=2, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=True)
    def forward(self, idx):
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))
def process_logits(input_ids, scores, cur_len: int, penalty=1.3, min_length=5, temperature=0.8,
                   top_k=8, top_p=0.9, filter_value=-float("inf")):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    scores = scores.scatter(1, input_ids, score)
    if cur_len < min_length:
        scores[:, EOS] = filter_value
    scores = scores / temperature
    indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
    scores = scores.masked_fill(indices_to_remove, filter_value)
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs <= (1 - top_p)
    sorted_indices_to_remove[..., -1:] = 0
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, filter_value)
model = NoPELM()
sync(model)
fwd = comp(model, dynamic=True)
processor = comp(process_logits, fullgraph=True)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                               {"params": no_decay, "weight_decay": 0.0}], lr=1e-2, betas=(0.9, 0.95))
r = np.random.default_rng(0)
def batch(n):
    """Counting sequences modulo VOCAB - 1 from random starts (EOS never inside)."""
    start = r.integers(0, VOCAB - 1, (n, 1))
    seq = torch.from_numpy((start + np.arange(BLOCK + 1)) % (VOCAB - 1) + 1)
    return seq[:, :-1], seq[:, 1:]
LOSSES, accum = [], 2
for step in range(2):
    optimizer.zero_grad(set_to_none=True)
    for micro in range(accum):
        x, y = batch(3)
        logits = fwd(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.reshape(-1)) / accum
        loss.backward()
        LOSSES.append(loss.item())
    LOSSES.append(nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
    optimizer.step()
model.eval()
with torch.inference_mode():
    idx = torch.tensor([[3, 4], [9, 10]])
    for cur in range(12):
        idx_cond = idx if idx.size(1) <= BLOCK else idx[:, -BLOCK:]
        logits = fwd(idx_cond)[:, -1, :]
        scores = processor(idx, logits, idx.size(1))
        probs = F.softmax(scores, dim=-1)
        u = torch.from_numpy(r.random((idx.size(0), 1)).astype(np.float32))
        idx_next = (probs.cumsum(-1) < u).sum(-1, keepdim=True).clamp(max=VOCAB - 1)
        idx = torch.cat((idx, idx_next), dim=1)
        LOSSES += probs[0].tolist()
    LOSSES += idx.flatten().tolist()
