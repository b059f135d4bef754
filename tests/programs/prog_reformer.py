from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Reformer LM (reformer-pytorch's LSHAttention): shared query/key projections hashed by
# random rotations (argmax over [xR, -xR]; drawn once into a buffer, as the frameworks'
# generators differ), positions sorted by
# bucket with argsort, attention within chunks and the chunk before (roll), the token's
# own key masked, causal masking by the gathered positions, the hash rounds merged by
# logsumexp weights after the sort is undone by gather; reversible residual blocks
# (y1 = x1 + f(x2), y2 = x2 + g(y1)); chunked feed-forward; AdamW, clip_grad_norm_
TOKEN_SELF_ATTN_VALUE = -5e4
def batched_index_select(values, indices):
    last_dim = values.shape[-1]
    return values.gather(1, indices[:, :, None].expand(-1, -1, last_dim))
def look_one_back(x):
    x_extra = torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)
    return torch.cat([x, x_extra], dim=2)
class LSHAttention(nn.Module):
    def __init__(self, dim, max_seq_len, bucket_size=4, n_hashes=2, causal=True):
        super().__init__()
        self.bucket_size, self.n_hashes, self.causal = bucket_size, n_hashes, causal
        n_buckets = max_seq_len // bucket_size
        self.register_buffer("rotations", torch.randn(1, dim, n_hashes, n_buckets // 2))
    def hash_vectors(self, n_buckets, vecs):
        batch_size = vecs.shape[0]
        random_rotations = self.rotations[..., :n_buckets // 2].expand(batch_size, -1, -1, -1)
        rotated_vecs = torch.einsum('btf,bfhi->bhti', vecs, random_rotations)
        rotated_vecs = torch.cat([rotated_vecs, -rotated_vecs], dim=-1)
        buckets = torch.argmax(rotated_vecs, dim=-1)
        offsets = torch.arange(self.n_hashes)
        offsets = torch.reshape(offsets * n_buckets, (1, -1, 1))
        return torch.reshape(buckets + offsets, (batch_size, -1,))
    def forward(self, qk, v):
        batch_size, seqlen, dim = qk.shape
        n_buckets = seqlen // self.bucket_size
        buckets = self.hash_vectors(n_buckets, qk)
        total_hashes = self.n_hashes
        ticker = torch.arange(total_hashes * seqlen).unsqueeze(0).expand_as(buckets)
        buckets_and_t = seqlen * buckets + (ticker % seqlen)
        buckets_and_t = buckets_and_t.detach()
        sbuckets_and_t, sticker = buckets_and_t.sort(dim=-1)
        _, undo_sort = sticker.sort(dim=-1)
        del ticker
        st = (sticker % seqlen)
        sqk = batched_index_select(qk, st)
        sv = batched_index_select(v, st)
        chunk_size = total_hashes * n_buckets
        bq_t = bkv_t = torch.reshape(st, (batch_size, chunk_size, -1))
        bqk = torch.reshape(sqk, (batch_size, chunk_size, -1, dim))
        bv = torch.reshape(sv, (batch_size, chunk_size, -1, dim))
        bq = bqk
        bk = F.normalize(bqk, p=2, dim=-1).type_as(bq)
        bk, bv, bkv_t = look_one_back(bk), look_one_back(bv), look_one_back(bkv_t)
        dots = torch.einsum('bhie,bhje->bhij', bq, bk) * (dim ** -0.5)
        masked_value = -torch.finfo(dots.dtype).max
        if self.causal:
            mask = bq_t[:, :, :, None] < bkv_t[:, :, None, :]
            dots.masked_fill_(mask, masked_value)
        self_mask = bq_t[:, :, :, None] == bkv_t[:, :, None, :]
        dots.masked_fill_(self_mask, TOKEN_SELF_ATTN_VALUE)
        dots_logsumexp = torch.logsumexp(dots, dim=-1, keepdim=True)
        dots = torch.exp(dots - dots_logsumexp).type_as(dots)
        bo = torch.einsum('buij,buje->buie', dots, bv)
        so = torch.reshape(bo, (batch_size, -1, dim))
        slogits = torch.reshape(dots_logsumexp, (batch_size, -1,))
        o = batched_index_select(so, undo_sort)
        logits = slogits.gather(1, undo_sort)
        o = torch.reshape(o, (batch_size, total_hashes, seqlen, dim))
        logits = torch.reshape(logits, (batch_size, total_hashes, seqlen, 1))
        probs = torch.exp(logits - torch.logsumexp(logits, dim=1, keepdim=True))
        return torch.sum(o * probs, dim=1)
class LSHSelfAttention(nn.Module):
    def __init__(self, dim, max_seq_len, heads=2, **kwargs):
        super().__init__()
        self.heads = heads
        self.toqk = nn.Linear(dim, dim, bias=False)
        self.tov = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.Linear(dim, dim)
        self.lsh_attn = LSHAttention(dim // heads, max_seq_len, **kwargs)
    def forward(self, x):
        b, t, e, h = *x.shape, self.heads
        def merge_heads(v):
            return v.view(b, t, h, -1).transpose(1, 2).reshape(b * h, t, -1)
        qk, v = merge_heads(self.toqk(x)), merge_heads(self.tov(x))
        out = self.lsh_attn(qk, v)
        out = out.view(b, h, t, -1).transpose(1, 2).reshape(b, t, -1)
        return self.to_out(out)
class ChunkedFeedForward(nn.Module):
    def __init__(self, dim, chunks=2):
        super().__init__()
        self.chunks = chunks
        self.net = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
    def forward(self, x):
        return torch.cat([self.net(c) for c in x.chunk(self.chunks, dim=-2)], dim=-2)
class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm, self.fn = nn.LayerNorm(dim), fn
    def forward(self, x):
        return self.fn(self.norm(x))
class ReversibleBlock(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.f, self.g = f, g
    def forward(self, x):
        x1, x2 = torch.chunk(x, 2, dim=2)
        y1 = x1 + self.f(x2)
        y2 = x2 + self.g(y1)
        return torch.cat([y1, y2], dim=2)
class ReformerLM(nn.Module):
    def __init__(self, num_tokens, dim, depth, max_seq_len, bucket_size=4):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList([ReversibleBlock(PreNorm(dim, LSHSelfAttention(dim, max_seq_len, bucket_size=bucket_size)),
                                                     PreNorm(dim, ChunkedFeedForward(dim)))
                                     for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, num_tokens)
    def forward(self, x):
        t = x.shape[1]
        x = self.token_emb(x) + self.pos_emb(torch.arange(t))
        x = torch.cat([x, x], dim=-1)
        for layer in self.layers:
            x = layer(x)
        x = torch.stack(x.chunk(2, dim=-1)).mean(dim=0)
        return self.out(self.norm(x))
VOCAB, SEQ = 12, 16
model = ReformerLM(VOCAB, 16, 2, SEQ)
sync(model)
net = comp(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
r = np.random.default_rng(0)
def batch(n):
    """Repeated random motifs: the second half of each row copies its first half."""
    half = torch.from_numpy(r.integers(0, VOCAB, (n, SEQ // 2 + 1)))
    seq = torch.cat([half, half], dim=1)
    return seq[:, :SEQ], seq[:, 1:SEQ + 1]
LOSSES = []
for step in range(3):
    x, y = batch(4)
    logits = net(x)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    LOSSES.append(nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    x, y = batch(2)
    x, y = x[:, :8], y[:, :8]          # a shorter sequence: fewer buckets
    logits = net(x)
    LOSSES += [F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()]
    LOSSES += logits[:, -1].flatten().tolist() + logits.argmax(-1)[0].tolist()
