from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class ODEFunc(nn.Module):
    def __init__(self, dim=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        for m in self.net.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0, std=0.1); nn.init.constant_(m.bias, val=0)
        self.nfe = 0
    def forward(self, t, y):
        self.nfe += 1
        return self.net(y ** 3)
def rk4_step(func, t, dt, y):
    k1 = func(t, y)
    k2 = func(t + dt / 2, y + dt * k1 / 2)
    k3 = func(t + dt / 2, y + dt * k2 / 2)
    k4 = func(t + dt, y + dt * k3)
    return y + dt * (k1 + 2 * k2 + 2 * k3 + k4) / 6
def odeint(func, y0, t):
    ys = [y0]; y = y0
    for i in range(len(t) - 1):
        y = rk4_step(func, t[i], t[i + 1] - t[i], y)
        ys.append(y)
    return torch.stack(ys)
true_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
t = torch.linspace(0., 2., 21)
with torch.no_grad():
    class Lambda(nn.Module):
        def forward(self, t, y): return torch.mm(y ** 3, true_A)
    true_y = odeint(Lambda(), torch.tensor([[2., 0.]]), t)   # (T, 1, 2)
func = ODEFunc(); sync(func)
step_fn = comp(func)
optimizer = torch.optim.RMSprop(func.parameters(), lr=1e-3)
r = np.random.default_rng(0)
def get_batch(batch_time=8, batch_size=10):
    s = torch.from_numpy(r.choice(np.arange(len(t) - batch_time, dtype=np.int64), batch_size, replace=False))
    batch_y0 = true_y[s]
    batch_t = t[:batch_time]
    batch_y = torch.stack([true_y[s + i] for i in range(batch_time)], dim=0)
    return batch_y0, batch_t, batch_y
LOSSES = []
for itr in range(4):
    optimizer.zero_grad()
    batch_y0, batch_t, batch_y = get_batch()
    pred_y = odeint(step_fn, batch_y0, batch_t)
    loss = torch.mean(torch.abs(pred_y - batch_y))
    loss.backward(); optimizer.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    pred_y = odeint(step_fn, true_y[0], t)
    LOSSES.append(torch.mean(torch.abs(pred_y - true_y)).item())
LOSSES.append(float(func.nfe > 0))
