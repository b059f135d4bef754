from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Longformer classifier as the paper's attention is usually re-implemented: sliding-window
# attention over keys padded by the window and cut into bands by `unfold`, a banded mask
# built from arange offsets, padding and global positions, global keys scored against every
# query and concatenated before the band's softmax, global queries with their own
# projections attending the whole sequence, written back by torch.where; the input padded
# to a multiple of the window, the global mask on [CLS] and the question's tokens, a linear
# warmup by LambdaLR, AdamW, clip_grad_norm_, and an eval pass under torch.no_grad
class LongformerSelfAttention(nn.Module):
    def __init__(self, d, n_heads, window):
        super().__init__()
        self.h, self.dh, self.w = n_heads, d // n_heads, window
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.query_global, self.key_global, self.value_global = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, d)
    def heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.h, self.dh).transpose(1, 2)
    def forward(self, x, attention_mask, is_global):
        B, T, D = x.shape
        w = self.w
        neg = torch.finfo(x.dtype).min
        q = self.heads(self.query(x)) / math.sqrt(self.dh)
        k, v = self.heads(self.key(x)), self.heads(self.value(x))
        k_band = F.pad(k, (0, 0, w, w)).unfold(2, 2 * w + 1, 1)      # B, H, T, dh, 2w+1
        v_band = F.pad(v, (0, 0, w, w)).unfold(2, 2 * w + 1, 1)
        band = torch.einsum("bhtd,bhtdw->bhtw", q, k_band)
        pos = torch.arange(T, device=x.device)[:, None] + torch.arange(-w, w + 1, device=x.device)
        in_range = (pos >= 0) & (pos < T)
        key_ok = F.pad(attention_mask, (w, w)).unfold(1, 2 * w + 1, 1).bool()
        key_global = F.pad(is_global, (w, w)).unfold(1, 2 * w + 1, 1)
        band = band.masked_fill(~(in_range & key_ok & ~key_global)[:, None], neg)
        glob = q @ k.transpose(-1, -2)                                   # B, H, T, T
        glob = glob.masked_fill(~(is_global & attention_mask.bool())[:, None, None, :], neg)
        probs = torch.cat([glob, band], dim=-1).softmax(dim=-1)
        out = probs[..., :T] @ v + torch.einsum("bhtw,bhtdw->bhtd", probs[..., T:], v_band)
        qg = self.heads(self.query_global(x)) / math.sqrt(self.dh)
        kg, vg = self.heads(self.key_global(x)), self.heads(self.value_global(x))
        sg = (qg @ kg.transpose(-1, -2)).masked_fill(attention_mask[:, None, None, :] == 0, neg)
        out_g = sg.softmax(-1) @ vg
        out = torch.where(is_global[:, None, :, None], out_g, out)
        return self.out(out.transpose(1, 2).reshape(B, T, D))
class Layer(nn.Module):
    def __init__(self, d, n_heads, window):
        super().__init__()
        self.attn = LongformerSelfAttention(d, n_heads, window)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
    def forward(self, x, attention_mask, is_global):
        x = self.ln1(x + self.attn(x, attention_mask, is_global))   # post-norm, as BERT/RoBERTa
        return self.ln2(x + self.ff(x))
class Longformer(nn.Module):
    def __init__(self, vocab=40, d=16, n_heads=2, n_layers=2, window=2, n_classes=3, max_len=32):
        super().__init__()
        self.window = window
        self.tok, self.pos = nn.Embedding(vocab, d, padding_idx=0), nn.Embedding(max_len, d)
        self.layers = nn.ModuleList([Layer(d, n_heads, window) for _ in range(n_layers)])
        self.cls = nn.Linear(d, n_classes)
    def forward(self, input_ids, attention_mask, global_attention_mask):
        pad = (-input_ids.shape[1]) % (2 * self.window)   # pad to a multiple of the window
        if pad:
            input_ids = F.pad(input_ids, (0, pad), value=0)
            attention_mask = F.pad(attention_mask, (0, pad), value=0)
            global_attention_mask = F.pad(global_attention_mask, (0, pad), value=0)
        is_global = global_attention_mask > 0
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for layer in self.layers:
            x = layer(x, attention_mask, is_global)
        return self.cls(torch.tanh(x[:, 0]))
def batch(r, n, length):
    ids = r.integers(3, 40, (n, length))
    lens = r.integers(length // 2, length + 1, n)
    mask = (np.arange(length)[None] < lens[:, None]).astype(np.int64)
    ids = ids * mask
    ids[:, 0] = 1                                 # [CLS]
    q_len = 3
    ids[:, q_len] = 2                             # [SEP] after the question
    glob = np.zeros_like(ids); glob[:, :q_len + 1] = 1
    y = (ids[:, 1:q_len].sum(1) + (ids * mask).max(1)) % 3
    t = lambda a: torch.from_numpy(a)
    return t(ids), t(mask), t(glob), t(y)
model = Longformer(); sync(model)
fwd = comp(model)
no_decay = ["bias", "ln1.weight", "ln2.weight"]
groups = [{"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
          {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=3e-3)
warmup, total = 2, 6
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: step / warmup if step < warmup else max(0.0, (total - step) / (total - warmup)))
r = np.random.default_rng(0)
LOSSES = []
for step in range(total):
    ids, mask, glob, y = batch(r, 4, 10 if step % 2 else 12)
    logits = fwd(ids, mask, glob)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    LOSSES.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
    optimizer.step()
    scheduler.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    ids, mask, glob, y = batch(r, 3, 12)
    logits = fwd(ids, mask, glob)
    LOSSES += logits.flatten().tolist() + [(logits.argmax(-1) == y).float().mean().item()]
