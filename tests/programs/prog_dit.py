from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# DiT (Peebles & Xie 2023) at toy size, the reference repo's structure: patch embedding,
# sinusoidal timestep and class-label embeddings (labels dropped for classifier-free
# guidance), adaLN-Zero modulated blocks, einsum unpatchify; trained on the epsilon
# objective, then sampled by DDIM with a guided half-batch.
def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=32):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.freq))

class LabelEmbedder(nn.Module):
    def __init__(self, n_cls, hidden, dropout_prob):
        super().__init__()
        self.table = nn.Embedding(n_cls + 1, hidden)   # the last row: "no label"
        self.n_cls, self.dropout_prob = n_cls, dropout_prob
    def forward(self, labels, train, force_drop_ids=None):
        if (train and self.dropout_prob > 0) or force_drop_ids is not None:
            drop = force_drop_ids == 1 if force_drop_ids is not None else None
            labels = torch.where(drop, self.n_cls, labels)
        return self.table(labels)

class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, int(hidden * mlp_ratio)), nn.GELU(approximate="tanh"),
                                 nn.Linear(int(hidden * mlp_ratio), hidden))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))
    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        h = modulate(self.norm1(x), shift_msa, scale_msa)
        x = x + gate_msa.unsqueeze(1) * self.attn(h, h, h, need_weights=False)[0]
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))

class FinalLayer(nn.Module):
    def __init__(self, hidden, patch, out_ch):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * out_ch)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))
    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))

class DiT(nn.Module):
    def __init__(self, size=8, patch=2, ch=3, hidden=32, depth=2, heads=4, n_cls=4, class_dropout=0.1):
        super().__init__()
        self.ch, self.patch = ch, patch
        self.x_embedder = nn.Conv2d(ch, hidden, patch, stride=patch)
        self.t_embedder = TimestepEmbedder(hidden)
        self.y_embedder = LabelEmbedder(n_cls, hidden, class_dropout)
        self.pos_embed = nn.Parameter(torch.zeros(1, (size // patch) ** 2, hidden), requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden, heads) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden, patch, ch)
        self.initialize_weights()
    def initialize_weights(self):
        def _basic_init(m):
            if isinstance(m, nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
        self.apply(_basic_init)
        g = size = int(self.pos_embed.shape[1] ** 0.5)
        pos = torch.arange(g, dtype=torch.float32)
        omega = 1.0 / 10000 ** (torch.arange(self.pos_embed.shape[-1] // 4, dtype=torch.float32) / (self.pos_embed.shape[-1] / 4))
        gy, gx = torch.meshgrid(pos, pos, indexing="ij")
        out = [f(c.reshape(-1)[:, None] * omega[None]) for c in (gy, gx) for f in (torch.sin, torch.cos)]
        self.pos_embed.data.copy_(torch.cat(out, dim=1).unsqueeze(0))
        for block in self.blocks:   # adaLN-Zero: the residual branches start closed
            nn.init.constant_(block.adaLN_modulation[-1].weight, 0)
            nn.init.constant_(block.adaLN_modulation[-1].bias, 0)
    def unpatchify(self, x):
        c, p = self.ch, self.patch
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(shape=(x.shape[0], c, h * p, h * p))
    def forward(self, x, t, y, force_drop_ids=None):
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, self.training, force_drop_ids)
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))
    def forward_with_cfg(self, x, t, y, cfg_scale):
        half = x[: len(x) // 2]
        combined = torch.cat([half, half], dim=0)
        eps = self.forward(combined, t, y)
        cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
        return torch.cat([half_eps, half_eps], dim=0)

T = 50
betas = torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).float()
model = DiT(); sync(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
f32 = lambda a: torch.from_numpy(np.asarray(a, np.float32))
for step in range(4):
    model.train()
    x0 = f32(rng.standard_normal((8, 3, 8, 8)))
    y = torch.from_numpy(rng.integers(0, 4, 8)); t = torch.from_numpy(rng.integers(0, T, 8))
    noise = f32(rng.standard_normal(x0.shape))
    drop = torch.from_numpy((rng.random(8) < 0.1).astype(np.int64))
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    loss = F.mse_loss(net(xt, t, y, force_drop_ids=drop), noise)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
model.eval()
sample_fn = comp(model.forward_with_cfg)
with torch.no_grad():   # DDIM, 5 steps, guidance 4.0 (the null class fills the second half)
    z = f32(rng.standard_normal((2, 3, 8, 8)))
    z = torch.cat([z, z], 0); y = torch.tensor([1, 3, 4, 4])
    ts = list(range(T - 1, -1, -10))
    for i, tt in enumerate(ts):
        t = torch.full((4,), tt, dtype=torch.long)
        eps = sample_fn(z, t, y, 4.0)
        a_t = alphas_cumprod[tt]; a_prev = alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0)
        x0_pred = (z - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        z = a_prev.sqrt() * x0_pred + (1 - a_prev).sqrt() * eps
LOSSES += [z[:2].abs().mean().item(), z.std().item()]
