from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
def sinusoidal(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
class ResBlock(nn.Module):
    def __init__(s, c, tdim):
        super().__init__()
        s.n1 = nn.GroupNorm(4, c); s.c1 = nn.Conv2d(c, c, 3, padding=1)
        s.t = nn.Linear(tdim, c); s.n2 = nn.GroupNorm(4, c); s.c2 = nn.Conv2d(c, c, 3, padding=1)
    def forward(s, x, temb):
        h = s.c1(F.silu(s.n1(x))) + s.t(F.silu(temb))[:, :, None, None]
        return x + s.c2(F.dropout(F.silu(s.n2(h)), 0.0, s.training))
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.inp = nn.Conv2d(1, 16, 3, padding=1); s.temb = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 32))
        s.b1 = ResBlock(16, 32); s.down = nn.Conv2d(16, 16, 3, stride=2, padding=1); s.b2 = ResBlock(16, 32)
        s.up = nn.Upsample(scale_factor=2, mode="nearest"); s.out = nn.Conv2d(32, 1, 3, padding=1)
    def forward(s, x, t):
        te = s.temb(sinusoidal(t, 16))
        h1 = s.b1(s.inp(x), te); h2 = s.b2(s.down(h1), te)
        return s.out(torch.cat([h1, s.up(h2)], 1))
T = 100
betas = torch.linspace(1e-4, 0.02, T); alphas = 1 - betas; ab = torch.cumprod(alphas, dim=0)
model = Net(); sync(model); ema = copy.deepcopy(model); ema.requires_grad_(False)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
r = np.random.default_rng(0); fwd = comp(model)
LOSSES = []
for i in range(3):
    x0 = torch.from_numpy(r.standard_normal((8, 1, 16, 16)).astype(np.float32))
    t = torch.from_numpy(r.integers(0, T, 8))
    noise = torch.from_numpy(r.standard_normal((8, 1, 16, 16)).astype(np.float32))
    a = ab.gather(0, t).view(-1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    loss = F.mse_loss(fwd(xt, t), noise)
    opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        for pe, p in zip(ema.parameters(), model.parameters()): pe.lerp_(p, 0.1)
    LOSSES.append(loss.item())
with torch.no_grad():
    x = torch.from_numpy(r.standard_normal((2, 1, 16, 16)).astype(np.float32))
    for tt in reversed(range(95, 100)):
        tb = torch.full((2,), tt, dtype=torch.long)
        eps = ema(x, tb)
        x = (x - betas[tt] / torch.sqrt(1 - ab[tt]) * eps) / torch.sqrt(alphas[tt])
    LOSSES.append(x.abs().mean().item())
