from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# RetNet as the small reimplementations write it: multi-scale retention with one decay
# per head (gamma = 1 - 2^(-5 - arange(heads))), the decay mask built from an arange outer
# difference by exp(n * log(gamma)) and masked by tril, xPos-like rotation of queries and
# keys (sin/cos of interleaved angles, rotate_every_two by torch.stack / flatten), a swish
# gate and GroupNorm over heads. The parallel form trains a character LM; the recurrent
# form (S = gamma * S + k^T v, kept in a fairseq-style incremental_state dict that each
# compiled step fills, and counts its position in) then generates token by token and must
# give the parallel form's outputs
def rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)
def theta_shift(x, sin, cos):
    return (x * cos) + (rotate_every_two(x) * sin)
class RetNetRelPos(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        angle = 1.0 / (10000 ** torch.linspace(0, 1, embed_dim // num_heads // 2))
        angle = angle.unsqueeze(-1).repeat(1, 2).flatten()
        decay = torch.log(1 - 2 ** (-5 - torch.arange(num_heads, dtype=torch.float)))
        self.register_buffer("angle", angle)
        self.register_buffer("decay", decay)
    def forward(self, slen, activate_recurrent=False, position=None):
        if activate_recurrent:
            index = torch.arange(position, position + 1).to(self.decay)
            sin, cos = torch.sin(index[:, None] * self.angle[None, :]), torch.cos(index[:, None] * self.angle[None, :])
            return (sin, cos), self.decay.exp()
        index = torch.arange(slen).to(self.decay)
        sin, cos = torch.sin(index[:, None] * self.angle[None, :]), torch.cos(index[:, None] * self.angle[None, :])
        mask = torch.tril(torch.ones(slen, slen).to(self.decay))
        mask = torch.masked_fill(index[:, None] - index[None, :], ~mask.bool(), float("inf"))
        mask = torch.exp(mask * self.decay[:, None, None])
        mask = torch.nan_to_num(mask)
        return (sin, cos), mask
class MultiScaleRetention(nn.Module):
    def __init__(self, embed_dim, value_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim, self.v_head_dim = embed_dim // num_heads, value_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.g_proj = nn.Linear(embed_dim, value_dim, bias=False)
        self.out_proj = nn.Linear(value_dim, embed_dim, bias=False)
        self.group_norm = nn.GroupNorm(num_heads, value_dim, affine=False)
    def _norm_gate_out(self, o, g):
        bsz, tgt_len = o.shape[:2]
        o = self.group_norm(o.reshape(bsz * tgt_len, -1)).view(bsz, tgt_len, -1)
        return self.out_proj(F.silu(g) * o)
    def parallel_forward(self, qr, kr, v, mask):
        bsz, tgt_len, embed_dim = v.size()
        vr = v.view(bsz, tgt_len, self.num_heads, self.v_head_dim).transpose(1, 2)
        qk_mat = qr @ kr.transpose(-1, -2)       # bsz * heads * tgt_len * tgt_len
        qk_mat = qk_mat * mask
        return torch.matmul(qk_mat, vr).transpose(1, 2)   # bsz * tgt_len * heads * v_head_dim
    def recurrent_forward(self, qr, kr, v, decay, incremental_state):
        bsz = v.size(0)
        v = v.view(bsz, self.num_heads, self.v_head_dim, 1)
        kv = kr * v                               # k^T v: bsz * heads * v_head_dim * head_dim
        if "prev_key_value" in incremental_state:
            kv = incremental_state["prev_key_value"] * decay.view(self.num_heads, 1, 1) + kv
        incremental_state["prev_key_value"] = kv
        return torch.sum(qr * kv, dim=3).view(bsz, 1, self.num_heads, self.v_head_dim)
    def forward(self, x, rel_pos, incremental_state=None):
        bsz, tgt_len, _ = x.size()
        (sin, cos), inner_mask = rel_pos
        q, k, v, g = self.q_proj(x), self.k_proj(x), self.v_proj(x), self.g_proj(x)
        k = k * self.scaling
        q = q.view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(bsz, tgt_len, self.num_heads, self.head_dim).transpose(1, 2)
        qr, kr = theta_shift(q, sin, cos), theta_shift(k, sin, cos)
        if incremental_state is not None:
            output = self.recurrent_forward(qr, kr, v, inner_mask, incremental_state)
        else:
            output = self.parallel_forward(qr, kr, v, inner_mask)
        return self._norm_gate_out(output, g)
class RetNetLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.retention = MultiScaleRetention(d, 2 * d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
    def forward(self, x, rel_pos, incremental_state=None):
        x = x + self.retention(self.ln1(x), rel_pos, incremental_state)
        return x + self.ffn(self.ln2(x))
class RetNetLM(nn.Module):
    def __init__(self, vocab=32, d=32, heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.retnet_rel_pos = RetNetRelPos(d, heads)
        self.layers = nn.ModuleList([RetNetLayer(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d); self.head = nn.Linear(d, vocab, bias=False)
    def forward(self, tokens, incremental_state=None):
        x = self.embed(tokens)
        slen = tokens.size(1)
        if incremental_state is not None:
            rel_pos = self.retnet_rel_pos(slen, True, incremental_state["step"])
        else:
            rel_pos = self.retnet_rel_pos(slen)
        for i, layer in enumerate(self.layers):
            state = None
            if incremental_state is not None:
                state = incremental_state.setdefault(i, {})
            x = layer(x, rel_pos, state)
        if incremental_state is not None:
            incremental_state["step"] += 1
        return self.head(self.ln_f(x))
model = RetNetLM(); sync(model)
fwd = comp(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
r = np.random.default_rng(0)
text = np.tile(r.integers(0, 32, size=(11,)), 60)
data = torch.from_numpy(np.where(r.random(text.shape) < 0.05, r.integers(0, 32, size=text.shape), text))
LOSSES = []
for it in range(6):
    ix = r.integers(0, len(data) - 25, size=(8,))
    x = torch.stack([data[i:i + 24] for i in ix]); y = torch.stack([data[i + 1:i + 25] for i in ix])
    logits = fwd(x)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
model.eval()
prompt = data[40:52].unsqueeze(0).repeat(2, 1)
with torch.no_grad():
    parallel = fwd(prompt)
    state = {"step": 0}
    recurrent = torch.cat([fwd(prompt[:, i:i + 1], state) for i in range(prompt.size(1))], dim=1)
    err = (parallel - recurrent).abs().max().item()
    assert err < 1e-4, err
    LOSSES += [parallel.log_softmax(-1).mean().item(), recurrent[:, -1].log_softmax(-1).max().item()]
    # greedy generation continues from the recurrent state
    tok, generated = recurrent[:, -1:].argmax(-1), []
    for _ in range(10):
        generated.append(tok)
        tok = fwd(tok, state)[:, -1:].argmax(-1)
    LOSSES += [float(t) for t in torch.cat(generated, 1)[0].tolist()]
