from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd as autograd
# A Hamiltonian neural network (greydanus/hamiltonian-nn style: the learned energy's input
# gradient by autograd.grad with create_graph=True, turned by the symplectic matrix, trained
# through that derivative, then integrated by RK4 under enable_grad) and a deep equilibrium
# layer (the implicit-layers tutorial: Anderson acceleration under no_grad with
# torch.linalg.solve and .item() residuals, one step with grad, and the implicit backward
# as a register_hook that solves for the fixed point of vector-Jacobian products), and a
# Lagrangian network by torch.func (hessian, nested jacrev, pinv, vmap) trained through q''
torch.manual_seed(0)


class MLP(torch.nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, nonlinearity='tanh'):
        super(MLP, self).__init__()
        self.linear1 = torch.nn.Linear(input_dim, hidden_dim)
        self.linear2 = torch.nn.Linear(hidden_dim, hidden_dim)
        self.linear3 = torch.nn.Linear(hidden_dim, output_dim, bias=None)
        for l in [self.linear1, self.linear2, self.linear3]:
            torch.nn.init.orthogonal_(l.weight)  # use a principled initialization
        self.nonlinearity = torch.tanh if nonlinearity == 'tanh' else F.softplus

    def forward(self, x, separate_fields=False):
        h = self.nonlinearity(self.linear1(x))
        h = self.nonlinearity(self.linear2(h))
        return self.linear3(h)


class HNN(torch.nn.Module):
    def __init__(self, input_dim, differentiable_model, field_type='solenoidal', baseline=False, assume_canonical_coords=True):
        super(HNN, self).__init__()
        self.baseline = baseline
        self.differentiable_model = differentiable_model
        self.assume_canonical_coords = assume_canonical_coords
        self.M = self.permutation_tensor(input_dim)  # Levi-Civita permutation tensor
        self.field_type = field_type

    def forward(self, x):
        # traditional forward pass
        if self.baseline:
            return self.differentiable_model(x)
        y = self.differentiable_model(x)
        assert y.dim() == 2 and y.shape[1] == 2, "Output tensor should have shape [batch_size, 2]"
        return y.split(1, 1)

    def time_derivative(self, x, t=None, separate_fields=False):
        if self.baseline:
            return self.differentiable_model(x)
        F1, F2 = self.forward(x)  # traditional forward pass
        conservative_field = torch.zeros_like(x)  # start out with both components set to 0
        solenoidal_field = torch.zeros_like(x)
        if self.field_type != 'solenoidal':
            dF1 = torch.autograd.grad(F1.sum(), x, create_graph=True)[0]  # gradients for conservative field
            conservative_field = dF1 @ torch.eye(*self.M.shape)
        if self.field_type != 'conservative':
            dF2 = torch.autograd.grad(F2.sum(), x, create_graph=True)[0]  # gradients for solenoidal field
            solenoidal_field = dF2 @ self.M.t()
        if separate_fields:
            return [conservative_field, solenoidal_field]
        return conservative_field + solenoidal_field

    def permutation_tensor(self, n):
        M = None
        if self.assume_canonical_coords:
            M = torch.eye(n)
            M = torch.cat([M[n // 2:], -M[:n // 2]])
        else:
            M = torch.ones(n, n)  # matrix of ones
            M *= 1 - torch.eye(n)  # clear diagonals
            M[::2] *= -1  # pattern of signs
            M[:, ::2] *= -1
            for i in range(n):  # make asymmetric
                for j in range(i + 1, n):
                    M[i, j] *= -1
        return M


def L2_loss(u, v):
    return (u - v).pow(2).mean()


def get_dataset(rng, samples=64, noise_std=0.1):
    # a mass on a spring: H = (q^2 + p^2) / 2, so dq/dt = p, dp/dt = -q
    r = rng.uniform(0.2, 1.0, samples)
    theta = rng.uniform(0, 2 * np.pi, samples)
    q, p = r * np.cos(theta), r * np.sin(theta)
    x = np.stack([q, p], 1) + noise_std * rng.standard_normal((samples, 2))
    dxdt = np.stack([p, -q], 1)
    return {'x': x.astype(np.float32), 'dx': dxdt.astype(np.float32)}


rng = np.random.default_rng(0)
data = get_dataset(rng)
output_dim = 2
nn_model = MLP(2, 32, output_dim, 'tanh')
sync(nn_model)
model = HNN(2, differentiable_model=comp(nn_model), field_type='solenoidal')
optim = torch.optim.Adam(model.parameters(), 1e-2, weight_decay=1e-4)
x = torch.tensor(data['x'], requires_grad=True, dtype=torch.float32)
dxdt = torch.Tensor(data['dx'])
stats = {'train_loss': []}
LOSSES = []
for step in range(6):
    ixs = torch.from_numpy(rng.permutation(x.shape[0])[:32])
    dxdt_hat = model.time_derivative(x[ixs])
    loss = L2_loss(dxdt[ixs], dxdt_hat)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()]).clone()
    optim.step()
    optim.zero_grad()
    stats['train_loss'].append(loss.item())
    LOSSES += [loss.item(), grad @ grad]
LOSSES = [float(v) for v in LOSSES]


def integrate_model(model, t_span, y0, steps):
    def fun(t, np_x):
        x = torch.tensor(np_x, requires_grad=True, dtype=torch.float32).view(1, 2)
        dx = model.time_derivative(x).data.numpy().reshape(-1)
        return dx
    ys, y, h = [y0], np.asarray(y0, np.float32), (t_span[1] - t_span[0]) / steps
    for i in range(steps):   # classical RK4 in numpy around the learned field
        k1 = fun(0, y); k2 = fun(0, y + h / 2 * k1); k3 = fun(0, y + h / 2 * k2); k4 = fun(0, y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        ys.append(y)
    return np.stack(ys)


traj = integrate_model(model, [0, 2], np.array([0.6, 0.0], np.float32), 8)
with torch.no_grad():
    H = model(torch.from_numpy(traj.astype(np.float32)))[1].squeeze(1)
LOSSES += [float(traj[-1, 0]), float(traj[-1, 1]), H.mean().item()]


# ---- a deep equilibrium layer -----------------------------------------------------------
class ResNetLayer(nn.Module):
    def __init__(self, n_channels, n_inner_channels, kernel_size=3, num_groups=4):
        super().__init__()
        self.conv1 = nn.Conv2d(n_channels, n_inner_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.conv2 = nn.Conv2d(n_inner_channels, n_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.norm1 = nn.GroupNorm(num_groups, n_inner_channels)
        self.norm2 = nn.GroupNorm(num_groups, n_channels)
        self.norm3 = nn.GroupNorm(num_groups, n_channels)
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)

    def forward(self, z, x):
        y = self.norm1(F.relu(self.conv1(z)))
        return self.norm3(F.relu(z + self.norm2(x + self.conv2(y))))


def anderson(f, x0, m=5, lam=1e-4, max_iter=50, tol=1e-2, beta=1.0):
    """ Anderson acceleration for fixed point iteration. """
    bsz, d, H, W = x0.shape
    X = torch.zeros(bsz, m, d * H * W, dtype=x0.dtype, device=x0.device)
    F = torch.zeros(bsz, m, d * H * W, dtype=x0.dtype, device=x0.device)
    X[:, 0], F[:, 0] = x0.view(bsz, -1), f(x0).view(bsz, -1)
    X[:, 1], F[:, 1] = F[:, 0], f(F[:, 0].view_as(x0)).view(bsz, -1)
    H = torch.zeros(bsz, m + 1, m + 1, dtype=x0.dtype, device=x0.device)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = torch.zeros(bsz, m + 1, 1, dtype=x0.dtype, device=x0.device)
    y[:, 0] = 1
    res = []
    for k in range(2, max_iter):
        n = min(k, m)
        G = F[:, :n] - X[:, :n]
        H[:, 1:n + 1, 1:n + 1] = torch.bmm(G, G.transpose(1, 2)) + lam * torch.eye(n, dtype=x0.dtype, device=x0.device)[None]
        alpha = torch.linalg.solve(H[:, :n + 1, :n + 1], y[:, :n + 1])[:, 1:n + 1, 0]   # (bsz x n)
        X[:, k % m] = beta * (alpha[:, None] @ F[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        F[:, k % m] = f(X[:, k % m].view_as(x0)).view(bsz, -1)
        res.append((F[:, k % m] - X[:, k % m]).norm().item() / (1e-5 + F[:, k % m].norm().item()))
        if (res[-1] < tol):
            break
    return X[:, k % m].view_as(x0), res


def forward_iteration(f, x0, max_iter=50, tol=1e-2):
    f0 = f(x0)
    res = []
    for k in range(max_iter):
        x = f0
        f0 = f(x)
        res.append((f0 - x).norm().item() / (1e-5 + f0.norm().item()))
        if (res[-1] < tol):
            break
    return f0, res


class DEQFixedPoint(nn.Module):
    def __init__(self, f, solver, **kwargs):
        super().__init__()
        self.f = f
        self.solver = solver
        self.kwargs = kwargs

    def forward(self, x):
        # compute forward pass and re-engage autograd tape
        with torch.no_grad():
            z, self.forward_res = self.solver(lambda z: self.f(z, x), torch.zeros_like(x), **self.kwargs)
        z = self.f(z, x)
        # set up Jacobian vector product (without additional forward calls)
        z0 = z.clone().detach().requires_grad_()
        f0 = self.f(z0, x)

        def backward_hook(grad):
            g, self.backward_res = self.solver(lambda y: autograd.grad(f0, z0, y, retain_graph=True)[0] + grad,
                                               grad, **self.kwargs)
            return g
        z.register_hook(backward_hook)
        return z


chan = 8
layer = ResNetLayer(chan, 16, kernel_size=3)
# (no conv bias before the BatchNorm: its gradient is zero up to rounding, which Adam would
# turn into lr-sized steps of either sign, visible in eval)
stem = nn.Sequential(nn.Conv2d(3, chan, kernel_size=3, bias=False, padding=1), nn.BatchNorm2d(chan))
head = nn.Sequential(nn.BatchNorm2d(chan), nn.AvgPool2d(4, 4), nn.Flatten(), nn.Linear(chan * 2 * 2, 5))
sync(layer, stem, head)
f = comp(layer)
deq_model = nn.Sequential(stem, DEQFixedPoint(f, anderson, tol=1e-3, max_iter=25, m=5), head)
opt = torch.optim.Adam(deq_model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 4, eta_min=1e-5)
X_img = torch.from_numpy(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
y_img = torch.from_numpy(rng.integers(0, 5, 4))
for epoch in range(3):
    yp = deq_model(X_img)
    loss = nn.CrossEntropyLoss()(yp, y_img)
    opt.zero_grad()
    loss.backward()
    opt.step()
    scheduler.step()
    deq = deq_model[1]
    LOSSES += [loss.item(), len(deq.forward_res), len(deq.backward_res)]
LOSSES.append(layer.conv1.weight.norm().item())
deq_model[1].solver = forward_iteration
deq_model[1].kwargs = dict(tol=1e-3, max_iter=40)
deq_model.eval()   # (the tutorial's evaluation runs with grad enabled: the hook needs it)
LOSSES.append(deq_model(X_img).softmax(1)[:, 0].mean().item())
LOSSES.append(len(deq_model[1].forward_res))


# ---- a Lagrangian neural network by torch.func (Cranmer et al.: q'' from the learned L's
# Hessian in the velocities, pinv'd, vmapped over the batch; trained through it) ----------
from torch.func import vmap, jacrev, hessian, functional_call
lnet = nn.Sequential(nn.Linear(4, 32), nn.Softplus(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 1))
sync(lnet)
lparams = dict(lnet.named_parameters())


def lagrangian(p, q, qd):   # a kinetic prior plus the learned part: the Hessian stays invertible
    return 0.5 * (qd * qd).sum(-1) + 0.1 * functional_call(lnet, p, (torch.cat([q, qd], -1),)).squeeze(-1)


def qdd(p, q, qd):
    H = hessian(lagrangian, argnums=2)(p, q, qd)
    Jq = jacrev(lagrangian, argnums=1)(p, q, qd)
    M = jacrev(jacrev(lagrangian, argnums=2), argnums=1)(p, q, qd)
    return torch.linalg.pinv(H) @ (Jq - M @ qd)


q = torch.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))
qd = torch.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))
lopt = torch.optim.Adam(lnet.parameters(), lr=1e-3)
for step in range(3):
    loss = (vmap(qdd, in_dims=(None, 0, 0))(lparams, q, qd) + q).pow(2).mean()
    lopt.zero_grad(); loss.backward(); lopt.step()
    LOSSES.append(loss.item())
