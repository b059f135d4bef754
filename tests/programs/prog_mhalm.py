from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# sampling by torch.multinomial after top-k filtering; top_k=1 keeps the tokens comparable
# across frameworks (their generators differ)
class Block(nn.Module):
    def __init__(self, d_model, n_head, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model), nn.Dropout(dropout))
    def forward(self, x, attn_mask, key_padding_mask=None):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
        x = x + a
        return x + self.mlp(self.ln2(x)), w
class DecoderLM(nn.Module):
    def __init__(self, vocab=20, d_model=16, n_head=2, n_layer=2, block_size=16):
        super().__init__()
        self.block_size = block_size
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, block_size, d_model))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight                      # weight tying
    def forward(self, idx, pad_mask=None):
        T = idx.size(1)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        x = self.tok(idx) * math.sqrt(self.tok.embedding_dim) + self.pos[:, :T]
        for blk in self.blocks:
            x, w = blk(x, mask, pad_mask)
        return self.head(self.ln_f(x)), w
@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None):
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= model.block_size else idx[:, -model.block_size:]
        logits, _ = model(idx_cond)
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, top_k)
            logits[logits < v[:, [-1]]] = -float('Inf')
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx
model = DecoderLM(); sync(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
fwd = comp(model)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    data = torch.from_numpy(r.integers(1, 20, (4, 13)))
    lengths = torch.tensor([13, 10, 12, 8])
    pad = torch.arange(13)[None, :] >= lengths[:, None]        # True where padded
    data = data.masked_fill(pad, 0)
    x, y = data[:, :-1], data[:, 1:].masked_fill(pad[:, 1:], -100)
    model.train()
    logits, attn_w = fwd(x, pad[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    LOSSES += [loss.item(), attn_w[1, -1, :10].sum().item()]
model.eval()
out = generate(fwd, torch.tensor([[1, 2, 3], [4, 5, 6]]), 5, temperature=0.8, top_k=1)
LOSSES += out.flatten().tolist()
