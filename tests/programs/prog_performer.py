from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A Performer language model as performer-pytorch writes it: FAVOR+ causal linear attention
# (positive softmax-kernel features from a Gaussian orthogonal random matrix built by
# torch.linalg.qr, a stabilizing amax(...).detach(), prefix sums of key-value outer products
# by cumsum), beside local heads of sliding-window attention (keys looked around by
# Tensor.unfold over a padded sequence), a feature redraw every few calls counted in a
# buffer, a ScaleNorm, then greedy generation under torch.inference_mode. The Gaussian
# blocks are drawn from numpy: the two frameworks' random generators differ
def orthogonal_matrix_chunk(cols, rng):
    unstructured_block = torch.from_numpy(rng.standard_normal((cols, cols)).astype(np.float32))
    q, r = torch.linalg.qr(unstructured_block, mode="reduced")
    return q.t()
def gaussian_orthogonal_random_matrix(nb_rows, nb_columns, rng, scaling=0):
    nb_full_blocks = int(nb_rows / nb_columns)
    block_list = [orthogonal_matrix_chunk(nb_columns, rng) for _ in range(nb_full_blocks)]
    remaining_rows = nb_rows - nb_full_blocks * nb_columns
    if remaining_rows > 0:
        block_list.append(orthogonal_matrix_chunk(nb_columns, rng)[:remaining_rows])
    final_matrix = torch.cat(block_list)
    if scaling == 0:
        multiplier = torch.from_numpy(rng.standard_normal((nb_rows, nb_columns)).astype(np.float32)).norm(dim=1)
    else:
        multiplier = math.sqrt(float(nb_columns)) * torch.ones((nb_rows,))
    return torch.diag(multiplier) @ final_matrix
def softmax_kernel(data, *, projection_matrix, is_query, normalize_data=True, eps=1e-4):
    b, h, *_ = data.shape
    data_normalizer = (data.shape[-1] ** -0.25) if normalize_data else 1.
    ratio = (projection_matrix.shape[0] ** -0.5)
    projection = projection_matrix.unsqueeze(0).unsqueeze(0).expand(b, h, -1, -1).type_as(data)
    data_dash = torch.einsum('...id,...jd->...ij', (data_normalizer * data), projection)
    diag_data = data ** 2
    diag_data = torch.sum(diag_data, dim=-1)
    diag_data = (diag_data / 2.0) * (data_normalizer ** 2)
    diag_data = diag_data.unsqueeze(dim=-1)
    if is_query:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=-1, keepdim=True).detach()) + eps)
    else:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=(-1, -2), keepdim=True).detach()) + eps)
    return data_dash.type_as(data)
def causal_linear_attention_noncuda(q, k, v, chunk_size=128, eps=1e-6):
    last_k_cumsum = 0
    last_ctx_cumsum = 0
    outs = []
    for q, k, v in zip(*map(lambda t: t.chunk(chunk_size, dim=-2), (q, k, v))):
        k_cumsum = last_k_cumsum + k.cumsum(dim=-2)
        D_inv = 1. / torch.einsum('...nd,...nd->...n', q, k_cumsum.type_as(q) + eps)
        context = torch.einsum('...nd,...ne->...nde', k, v)
        context_cumsum = last_ctx_cumsum + context.cumsum(dim=-3)
        out = torch.einsum('...nde,...nd,...n->...ne', context_cumsum, q, D_inv)
        last_k_cumsum = k_cumsum[:, :, -1:]
        last_ctx_cumsum = context_cumsum[:, :, -1:]
        outs.append(out)
    return torch.cat(outs, dim=-2)
class FastAttention(nn.Module):
    def __init__(self, dim_heads, nb_features, rng):
        super().__init__()
        self.nb_features, self.dim_heads = nb_features, dim_heads
        projection_matrix = gaussian_orthogonal_random_matrix(nb_features, dim_heads, rng)
        self.register_buffer('projection_matrix', projection_matrix)
    @torch.no_grad()
    def redraw_projection_matrix(self, rng):
        projections = gaussian_orthogonal_random_matrix(self.nb_features, self.dim_heads, rng)
        self.projection_matrix.copy_(projections)
    def forward(self, q, k, v):
        q = softmax_kernel(q, is_query=True, projection_matrix=self.projection_matrix)
        k = softmax_kernel(k, is_query=False, projection_matrix=self.projection_matrix)
        return causal_linear_attention_noncuda(q, k, v, chunk_size=8)
def local_attention(q, k, v, window_size):
    # each query sees itself and the window_size keys before it
    b, h, t, d = q.shape
    k = F.pad(k, (0, 0, window_size, 0)).unfold(2, window_size + 1, 1)   # b h t d w+1
    v = F.pad(v, (0, 0, window_size, 0)).unfold(2, window_size + 1, 1)
    sim = torch.einsum('bhtd,bhtdw->bhtw', q, k) * d ** -0.5
    pos = torch.arange(t, device=q.device)[:, None] + torch.arange(window_size + 1, device=q.device) - window_size
    sim = sim.masked_fill((pos < 0)[None, None], -torch.finfo(sim.dtype).max)
    attn = sim.softmax(dim=-1)
    return torch.einsum('bhtw,bhtdw->bhtd', attn, v)
class SelfAttention(nn.Module):
    def __init__(self, dim, heads, local_heads, nb_features, window_size, rng):
        super().__init__()
        self.heads, self.local_heads, self.window_size = heads, local_heads, window_size
        dim_head = dim // heads
        self.fast_attention = FastAttention(dim_head, nb_features, rng)
        self.to_q, self.to_k, self.to_v = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.to_out = nn.Linear(dim, dim)
    def forward(self, x):
        b, n, _, h, gh = *x.shape, self.heads, self.heads - self.local_heads
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        q, k, v = map(lambda t: t.reshape(b, n, h, -1).transpose(1, 2), (q, k, v))
        (q, lq), (k, lk), (v, lv) = map(lambda t: (t[:, :gh], t[:, gh:]), (q, k, v))
        attn_outs = [self.fast_attention(q, k, v)]
        if self.local_heads > 0:
            attn_outs.append(local_attention(lq, lk, lv, self.window_size))
        out = torch.cat(attn_outs, dim=1)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)
class ScaleNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1) * dim ** 0.5)
        self.eps = eps
    def forward(self, x):
        n = torch.norm(x, dim=-1, keepdim=True).clamp(min=self.eps)
        return x / n * self.g
class PerformerLM(nn.Module):
    def __init__(self, num_tokens=40, max_seq_len=32, dim=32, depth=2, heads=4, local_heads=1,
                 nb_features=24, window_size=4, feature_redraw_interval=2, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                ScaleNorm(dim), SelfAttention(dim, heads, local_heads, nb_features, window_size, rng),
                ScaleNorm(dim), nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))]))
        self.norm = nn.LayerNorm(dim)
        self.to_out = nn.Linear(dim, num_tokens)
        self.feature_redraw_interval = feature_redraw_interval
        self.register_buffer('calls_since_last_redraw', torch.tensor(0))
    def check_redraw_projections(self, rng):
        if not self.training:
            return
        if int(self.calls_since_last_redraw) >= self.feature_redraw_interval:
            for fast_attention in [m for m in self.modules() if isinstance(m, FastAttention)]:
                fast_attention.redraw_projection_matrix(rng)
            self.calls_since_last_redraw.zero_()
            return
        self.calls_since_last_redraw += 1
    def forward(self, x):
        b, n = x.shape
        x = self.token_emb(x) + self.pos_emb(torch.arange(n, device=x.device))
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x))
            x = x + ff(norm2(x))
        return self.to_out(self.norm(x))
model = PerformerLM(); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
rng = np.random.default_rng(0); redraw_rng = np.random.default_rng(1)
base = np.arange(200) % 13 + (np.arange(200) // 13) % 3
LOSSES = []
for step in range(5):
    ix = rng.integers(0, 200 - 25, size=4)
    seq = torch.from_numpy(np.stack([base[i:i + 25] for i in ix]).astype(np.int64))
    model.check_redraw_projections(redraw_rng)
    logits = net(seq[:, :-1])
    loss = F.cross_entropy(logits.transpose(1, 2), seq[:, 1:])
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step(); sched.step()
    LOSSES += [loss.item(), int(model.calls_since_last_redraw)]
model.eval()
out = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8], [3, 4, 5, 6, 7, 8, 9, 10]])
with torch.inference_mode():
    for _ in range(4):
        logits = net(out)[:, -1]
        out = torch.cat([out, logits.argmax(-1, keepdim=True)], dim=-1)
    LOSSES += out[:, 8:].flatten().tolist() + [logits.log_softmax(-1).max(-1).values.sum().item()]
LOSSES.append(model.layers[0][1].fast_attention.projection_matrix.abs().sum().item())
