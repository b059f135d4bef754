from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# a Llama-style decoder as the minimal reimplementations write it: RMSNorm, rotary position
# embeddings applied by position ids, grouped-query attention by
# F.scaled_dot_product_attention with a boolean mask, SwiGLU MLP, untied head; trained a
# few steps, then a batch of left-padded prompts decoded greedily with a per-layer
# (key, value) tuple cache, the attention mask growing by one column a step
class ModelArgs:
    dim = 32; n_layers = 2; n_heads = 4; n_kv_heads = 2; vocab_size = 40; multiple_of = 16; norm_eps = 1e-5
def precompute_freqs(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.cos(freqs), torch.sin(freqs)
def apply_rotary_emb(x, cos, sin):
    # x: (B, H, T, hd); cos, sin: (B, T, hd/2) gathered at each token's position
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[:, None], sin[:, None]
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.flatten(-2)
def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    bs, n_kv_heads, slen, head_dim = x.shape
    return x[:, :, None, :, :].expand(bs, n_kv_heads, n_rep, slen, head_dim).reshape(bs, n_kv_heads * n_rep, slen, head_dim)
class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads, self.n_kv_heads = args.n_heads, args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
    def forward(self, x, cos, sin, mask, past_key_value=None):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        xq, xk = apply_rotary_emb(xq, cos, sin), apply_rotary_emb(xk, cos, sin)
        if past_key_value is not None:
            xk = torch.cat([past_key_value[0], xk], dim=2)
            xv = torch.cat([past_key_value[1], xv], dim=2)
        present = (xk, xv)
        keys = repeat_kv(xk, self.n_heads // self.n_kv_heads)
        values = repeat_kv(xv, self.n_heads // self.n_kv_heads)
        output = F.scaled_dot_product_attention(xq, keys, values, attn_mask=mask)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output), present
class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, multiple_of):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = nn.RMSNorm(args.dim, eps=args.norm_eps)
    def forward(self, x, cos, sin, mask, past_key_value=None):
        a, present = self.attention(self.attention_norm(x), cos, sin, mask, past_key_value)
        h = x + a
        return h + self.feed_forward(self.ffn_norm(h)), present
class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList([TransformerBlock(params) for _ in range(params.n_layers)])
        self.norm = nn.RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        cos, sin = precompute_freqs(params.dim // params.n_heads, 64)
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
    def forward(self, tokens, position_ids, attention_mask, past_key_values=None):
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[position_ids], self.freqs_sin[position_ids]
        presents = []
        for i, layer in enumerate(self.layers):
            h, present = layer(h, cos, sin, attention_mask, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.output(self.norm(h)), tuple(presents)
model = Transformer(ModelArgs()); sync(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
fwd = comp(model)
r = np.random.default_rng(0)
data = torch.from_numpy(r.integers(1, 40, size=(800,)))
LOSSES = []
model.train()
T = 12
causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
for it in range(3):
    ix = r.integers(0, len(data) - T - 1, size=(4,))
    x = torch.stack([data[i:i + T] for i in ix]); y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    pos = torch.arange(T).expand(4, T)
    logits, _ = fwd(x, pos, causal)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    LOSSES.append(loss.item())
model.eval()
prompts = [[5, 7, 9], [3, 4, 5, 6, 7], [11, 2, 30, 8]]
pad_id, L = 0, max(len(p) for p in prompts)
input_ids = torch.tensor([[pad_id] * (L - len(p)) + p for p in prompts])
attention_mask = (input_ids != pad_id).long()
generated = []
with torch.no_grad():
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))[None, None] & attention_mask[:, None, None, :].bool()
    # a row of padding attends nowhere: let it see itself (its output is never used)
    mask = mask | torch.eye(L, dtype=torch.bool)[None, None]
    logits, past_key_values = fwd(input_ids, position_ids, mask)
    for step in range(10):
        next_tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        generated.append(next_tokens)
        attention_mask = torch.cat([attention_mask, torch.ones_like(next_tokens)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        logits, past_key_values = fwd(next_tokens, position_ids, attention_mask[:, None, None, :].bool(),
                                      past_key_values=past_key_values)
out = torch.cat(generated, dim=1)
assert out.shape == (3, 10) and past_key_values[0][0].shape == (3, 2, L + 10, 8)
LOSSES += [float(t) for t in out.flatten().tolist()] + [logits.abs().mean().item()]
