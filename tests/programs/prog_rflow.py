from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, math, numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# rectified flow / flow matching on 2-D toy data as the minimal repos write it: a velocity
# MLP conditioned on t by sinusoidal embeddings, x_t = (1 - t) x0 + t x1 between Gaussian
# noise and eight Gaussians on a circle, loss ||v(x_t, t) - (x1 - x0)||^2 with t ~ U(0, 1);
# an EMA copy updated by torch._foreach_mul_ / _foreach_add_ (and copy_ in a loop for its
# buffers), sampled by an Euler ODE loop under no_grad with the EMA velocity net compiled.
# The draws come from numpy so both frameworks see the same ones
def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
class VelocityNet(nn.Module):
    def __init__(self, dim=2, hidden=64, t_dim=16):
        super().__init__()
        self.t_dim = t_dim
        self.t_mlp = nn.Sequential(nn.Linear(t_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.inp = nn.Linear(dim, hidden)
        self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.SiLU(),
                                                   nn.Linear(hidden, hidden)) for _ in range(3)])
        self.out = nn.Linear(hidden, dim)
        self.register_buffer("num_updates", torch.zeros((), dtype=torch.long))
    def forward(self, x, t):
        h = self.inp(x) + self.t_mlp(timestep_embedding(t * 1000, self.t_dim))
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)
def eight_gaussians(r, n):
    centers = np.array([(math.cos(a), math.sin(a)) for a in np.arange(8) * math.pi / 4]) * 2.0
    return torch.from_numpy((centers[r.integers(0, 8, n)] + 0.1 * r.standard_normal((n, 2))).astype(np.float32))
@torch.no_grad()
def update_ema(ema, model, decay):
    ema_params, params = list(ema.parameters()), list(model.parameters())
    torch._foreach_mul_(ema_params, decay)
    torch._foreach_add_(ema_params, params, alpha=1 - decay)
    for b_ema, b in zip(ema.buffers(), model.buffers()):
        b_ema.copy_(b)
@torch.no_grad()
def sample(v_fn, z, steps):
    dt = 1.0 / steps
    traj = [z]
    for i in range(steps):
        t = torch.full((z.size(0),), i / steps)
        z = z + dt * v_fn(z, t)
        traj.append(z)
    return z, traj
model = VelocityNet(); sync(model)
ema = copy.deepcopy(model).eval().requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
fwd, ema_fwd = comp(model), comp(ema)
r = np.random.default_rng(0)
LOSSES = []
for step in range(30):
    x1 = eight_gaussians(r, 128)
    x0 = torch.from_numpy(r.standard_normal((128, 2)).astype(np.float32))
    t = torch.from_numpy(r.random(128).astype(np.float32))
    xt = (1 - t[:, None]) * x0 + t[:, None] * x1
    loss = ((fwd(xt, t) - (x1 - x0)) ** 2).sum(dim=1).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    model.num_updates += 1
    update_ema(ema, model, decay=0.9)
    if step % 6 == 5:
        LOSSES.append(loss.item())
z = torch.from_numpy(r.standard_normal((256, 2)).astype(np.float32))
x, traj = sample(ema_fwd, z, steps=16)
LOSSES += [x.mean().item(), x.std().item(), x.norm(dim=1).mean().item(), int(ema.num_updates)]
# straightness: how far the Euler path strays from the straight line between its ends
line = torch.stack(traj)
chord = z + torch.linspace(0, 1, 17)[:, None, None] * (x - z)
LOSSES.append((line - chord).norm(dim=-1).mean().item())
