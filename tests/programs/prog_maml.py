from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.func import functional_call
torch.manual_seed(0)
# MAML on sinusoid regression (Finn et al. 2017): 2 inner SGD steps, second order
model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1)); sync(model)
meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
r = np.random.default_rng(0)
def task(k=10):
    amp, phase = r.uniform(0.1, 5.0), r.uniform(0, np.pi)
    xs = r.uniform(-5, 5, (2 * k, 1)).astype(np.float32)
    ys = (amp * np.sin(xs - phase)).astype(np.float32)
    return torch.from_numpy(xs[:k]), torch.from_numpy(ys[:k]), torch.from_numpy(xs[k:]), torch.from_numpy(ys[k:])
inner_lr, inner_steps = 0.01, 2
LOSSES = []
for it in range(3):
    meta_opt.zero_grad(); meta_loss = 0.0
    for _ in range(4):
        xs, ys, xq, yq = task()
        params = dict(model.named_parameters())
        for _ in range(inner_steps):
            loss = F.mse_loss(functional_call(model, params, (xs,)), ys)
            grads = torch.autograd.grad(loss, params.values(), create_graph=True)
            params = {n: p - inner_lr * g for (n, p), g in zip(params.items(), grads)}
        meta_loss = meta_loss + F.mse_loss(functional_call(model, params, (xq,)), yq)
    meta_loss = meta_loss / 4
    meta_loss.backward(); meta_opt.step(); LOSSES.append(meta_loss.item())
# the manual functional forward of the original code (weights as a list), first order
def forward(x, w):
    x = F.relu(F.linear(x, w[0], w[1])); x = F.relu(F.linear(x, w[2], w[3])); return F.linear(x, w[4], w[5])
weights = [p.detach().clone().requires_grad_() for p in model.parameters()]
opt = torch.optim.Adam(weights, lr=1e-3)
for it in range(2):
    xs, ys, xq, yq = task()
    fast = weights
    for _ in range(inner_steps):
        g = torch.autograd.grad(F.mse_loss(forward(xs, fast), ys), fast)
        fast = [w - inner_lr * gi for w, gi in zip(fast, g)]
    ql = F.mse_loss(forward(xq, fast), yq); opt.zero_grad(); ql.backward(); opt.step(); LOSSES.append(ql.item())
LOSSES.append(sum(w.grad.abs().sum().item() for w in weights))
