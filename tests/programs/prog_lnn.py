from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from torch.func import functional_call, hessian, jacrev, vmap
torch.manual_seed(0)
# Lagrangian neural networks (Cranmer et al.) as their PyTorch ports write them: an MLP
# Lagrangian L(q, q_t) whose Euler-Lagrange equations give the accelerations,
# q_tt = pinv(d2L/dq_t2) (dL/dq - d2L/dq_t dq q_t), by torch.func's hessian and
# jacrev composed and vmapped over the batch, functional_call over the module's parameters,
# trained by Adam on a double pendulum's analytic accelerations (drawn with numpy), then an
# RK4 rollout of the learned dynamics under no_grad
def f_analytical(state, m1=1, m2=1, l1=1, l2=1, g=9.8):
    t1, t2, w1, w2 = state.T
    a1 = (l2 / l1) * (m2 / (m1 + m2)) * np.cos(t1 - t2)
    a2 = (l1 / l2) * np.cos(t1 - t2)
    f1 = -(l2 / l1) * (m2 / (m1 + m2)) * (w2**2) * np.sin(t1 - t2) - (g / l1) * np.sin(t1)
    f2 = (l1 / l2) * (w1**2) * np.sin(t1 - t2) - (g / l2) * np.sin(t2)
    g1 = (f1 - a1 * f2) / (1 - a1 * a2)
    g2 = (f2 - a2 * f1) / (1 - a1 * a2)
    return np.stack([w1, w2, g1, g2], 1)
class MLP(nn.Module):
    def __init__(self, n_in=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.Softplus(), nn.Linear(hidden, hidden),
                                 nn.Softplus(), nn.Linear(hidden, 1))
    def forward(self, x):
        return self.net(x)
class LNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lagrangian = MLP()
    def forward(self, state):
        params = dict(self.lagrangian.named_parameters())
        def L(q, q_t):
            return functional_call(self.lagrangian, params, (torch.cat([q, q_t], -1),)).squeeze(-1)
        def eom(x):
            q, q_t = torch.split(x, 2, dim=-1)
            H = hessian(L, argnums=1)(q, q_t)                   # d2L / dq_t2
            dL_dq = jacrev(L, argnums=0)(q, q_t)
            mixed = jacrev(jacrev(L, argnums=1), argnums=0)(q, q_t)   # d2L / dq_t dq
            q_tt = torch.linalg.pinv(H) @ (dL_dq - mixed @ q_t)
            return torch.cat([q_t, q_tt])
        return vmap(eom)(state)
def rk4_step(f, x, dt):
    k1 = f(x)
    k2 = f(x + dt / 2 * k1)
    k3 = f(x + dt / 2 * k2)
    k4 = f(x + dt * k3)
    return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
rng = np.random.default_rng(0)
x_train = np.concatenate([rng.uniform(-0.5, 0.5, (48, 2)), rng.uniform(-1, 1, (48, 2))], 1)
y_train = f_analytical(x_train)
x_train, y_train = torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train, dtype=torch.float32)
raw = LNN()
sync(raw)
model = comp(raw)
optimizer = torch.optim.Adam(raw.parameters(), lr=1e-3)
LOSSES = []
for step in range(2):
    idx = rng.integers(0, 48, 6)
    x, y = x_train[idx], y_train[idx]
    loss = ((model(x)[:, 2:] - y[:, 2:]) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(raw.parameters(), 10.0)
    optimizer.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    x = x_train[:2]
    for _ in range(2):
        x = rk4_step(model, x, 0.01)
    LOSSES += [x.sum().item(), x.abs().max().item()]
