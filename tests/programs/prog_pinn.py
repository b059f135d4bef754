from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# Burgers' equation u_t + u u_x - (0.01/pi) u_xx = 0 on x in [-1, 1], t in [0, 1]
class PINN(nn.Module):
    def __init__(s, layers=(2, 20, 20, 20, 1)):
        super().__init__()
        s.linears = nn.ModuleList([nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:])])
        s.activation = nn.Tanh()
    def forward(s, x, t):
        a = torch.cat([x, t], dim=1)
        for l in s.linears[:-1]: a = s.activation(l(a))
        return s.linears[-1](a)
nu = 0.01 / math.pi
def residual(model, x, t):
    u = model(x, t)
    u_x, u_t = torch.autograd.grad(u, [x, t], grad_outputs=torch.ones_like(u), create_graph=True)
    u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
    return u_t + u * u_x - nu * u_xx
r = np.random.default_rng(0)
x_f = torch.from_numpy(r.uniform(-1, 1, (64, 1)).astype(np.float32)).requires_grad_(True)
t_f = torch.tensor(r.uniform(0, 1, (64, 1)), dtype=torch.float32, requires_grad=True)
x0 = torch.linspace(-1, 1, 16).view(-1, 1); t0 = torch.zeros_like(x0); u0 = -torch.sin(math.pi * x0)
tb = torch.from_numpy(r.uniform(0, 1, (8, 1)).astype(np.float32))
xb = torch.cat([torch.ones(8, 1), -torch.ones(8, 1)]); tb = torch.cat([tb, tb])
model = PINN(); sync(model); fwd = comp(model)
mse = nn.MSELoss()
def loss_fn():
    f = residual(fwd, x_f, t_f)
    return mse(fwd(x0, t0), u0) + mse(fwd(xb, tb), torch.zeros_like(tb)) + mse(f, torch.zeros_like(f))
LOSSES = []
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(3):
    opt.zero_grad(); loss = loss_fn(); loss.backward(); opt.step(); LOSSES.append(loss.item())
lbfgs = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=5, history_size=10, line_search_fn="strong_wolfe")
def closure():
    lbfgs.zero_grad(); loss = loss_fn(); loss.backward(); return loss
LOSSES.append(lbfgs.step(closure).item()); LOSSES.append(loss_fn().item())
# a 1-D Poisson problem u'' = -pi^2 sin(pi x) with torch.autograd.functional-free derivatives
xs = torch.linspace(0, 1, 32, requires_grad=True).unsqueeze(1)
net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1)); sync(net)
u = net(xs); du = torch.autograd.grad(u.sum(), xs, create_graph=True)[0]
d2u = torch.autograd.grad(du.sum(), xs, create_graph=True)[0]
pl = ((d2u + math.pi ** 2 * torch.sin(math.pi * xs)) ** 2).mean() + u[0].pow(2).sum() + u[-1].pow(2).sum()
pl.backward(); LOSSES += [pl.item(), net[0].weight.grad.norm().item()]
