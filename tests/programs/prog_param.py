from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.nn.utils.parametrize as P
from torch.nn.utils import parametrizations
torch.manual_seed(0)
class Symmetric(nn.Module):        # the parametrizations tutorial's first example
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)
class NoNegative(nn.Module):
    def forward(self, X):
        return F.softplus(X)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.sym = nn.Linear(8, 8)
        self.pos = nn.Linear(8, 8)
        self.orth = parametrizations.orthogonal(nn.Linear(8, 8))
        self.out = nn.Linear(8, 3)
        self.register_buffer("running_mean", torch.zeros(8))
        self.register_buffer("num_batches", torch.tensor(0))
        P.register_parametrization(self.sym, "weight", Symmetric())
        P.register_parametrization(self.pos, "weight", NoNegative())
    def forward(self, x):
        h = torch.tanh(self.inp(x))
        if self.training:
            with torch.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * h.mean(0))
                self.num_batches += 1
        h = h - self.running_mean
        h = torch.tanh(self.sym(h))
        h = torch.relu(self.pos(h))
        return self.out(self.orth(h))
model = Net(); sync(model)
grads = {}
model.out.weight.register_hook(lambda g: grads.__setitem__("out", g.norm().item()))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
fwd = comp(model)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    x = torch.from_numpy(r.standard_normal((10, 6)).astype(np.float32))
    y = torch.from_numpy(r.integers(0, 3, 10))
    loss = F.cross_entropy(fwd(x), y)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    LOSSES += [loss.item(), grads["out"]]
activations = {}
def get_activation(name):
    def hook(model, input, output):
        activations[name] = output.detach()
    return hook
handles = [model.sym.register_forward_hook(get_activation("sym")),
           model.orth.register_forward_hook(get_activation("orth"))]
seen = []
model.inp.register_forward_pre_hook(lambda m, inp: seen.append(inp[0].shape[0]))
model.eval()
with torch.no_grad():
    model(x); model(x[:4])
LOSSES += [activations["sym"].abs().mean().item(), activations["orth"].std().item()]
for h in handles:
    h.remove()
W = model.sym.weight
LOSSES += [(W - W.T).abs().max().item(), model.pos.weight.min().item() > 0,
           (model.orth.weight @ model.orth.weight.T - torch.eye(8)).abs().max().item() < 1e-4,
           model.running_mean.sum().item(), model.num_batches.item(), float(sum(seen))]
with P.cached():
    LOSSES.append(model.sym.weight.sum().item())
P.remove_parametrizations(model.pos, "weight", leave_parametrized=True)
LOSSES.append(model.pos.weight.sum().item())
LOSSES.append(float(len(activations)))
