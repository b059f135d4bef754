from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# FFJORD (Grathwohl et al. 2019, as rtqichen/ffjord writes its 2-D toy), scaled down: a
# continuous normalizing flow whose vector field is a stack of ConcatSquashLinear layers
# (gated and biased by hypernets of t), the log-density change integrated with it by a
# fixed-step RK4 in Python, the divergence estimated by Hutchinson's trick
# (autograd.grad(f, y, e, create_graph=True) against Rademacher noise set before each
# solve, drawn by numpy: the two frameworks draw different streams), RNODE's kinetic
# energy and Jacobian Frobenius regularizers integrated alongside, the base density an
# Independent Normal; trained by Adam under CosineAnnealingLR with gradient clipping,
# then sampled by integrating backwards under no_grad


class ConcatSquashLinear(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self._layer = nn.Linear(dim_in, dim_out)
        self._hyper_bias = nn.Linear(1, dim_out, bias=False)
        self._hyper_gate = nn.Linear(1, dim_out)

    def forward(self, t, x):
        return self._layer(x) * torch.sigmoid(self._hyper_gate(t.view(1, 1))) \
            + self._hyper_bias(t.view(1, 1))


class ODEnet(nn.Module):
    def __init__(self, hidden_dims, input_dim):
        super().__init__()
        dims = (input_dim,) + tuple(hidden_dims) + (input_dim,)
        self.layers = nn.ModuleList([ConcatSquashLinear(a, b) for a, b in zip(dims[:-1], dims[1:])])
        self.activation_fns = nn.ModuleList([nn.Softplus() for _ in range(len(dims) - 2)])

    def forward(self, t, y):
        dx = y
        for l, layer in enumerate(self.layers):
            dx = layer(t, dx)
            if l < len(self.layers) - 1:
                dx = self.activation_fns[l](dx)
        return dx


def divergence_approx(f, y, e=None):
    e_dzdx = torch.autograd.grad(f, y, e, create_graph=True)[0]
    e_dzdx_e = e_dzdx * e
    approx_tr_dzdx = e_dzdx_e.view(y.shape[0], -1).sum(dim=1)
    return approx_tr_dzdx, e_dzdx


class ODEfunc(nn.Module):
    def __init__(self, diffeq):
        super().__init__()
        self.diffeq = diffeq
        self.register_buffer("_num_evals", torch.tensor(0.))
        self._e = None

    def before_odeint(self, e=None):
        self._e = e
        self._num_evals.fill_(0)

    def forward(self, t, states):
        y = states[0]
        self._num_evals += 1
        with torch.set_grad_enabled(True):
            if not y.requires_grad:
                y.requires_grad_(True)
            dy = self.diffeq(t, y)
            if not self.training:   # sampling: the divergence is not needed
                zeros = torch.zeros(y.shape[0], 1)
                return dy, zeros, zeros, zeros
            divergence, e_dzdx = divergence_approx(dy, y, e=self._e)
            kinetic = dy.pow(2).sum(1, keepdim=True)
            frobenius = e_dzdx.pow(2).sum(1, keepdim=True)
        return dy, -divergence.view(-1, 1), kinetic, frobenius


def odeint_rk4(func, state, t0, t1, steps):
    h = (t1 - t0) / steps
    t = torch.tensor(float(t0))
    for _ in range(steps):
        k1 = func(t, state)
        k2 = func(t + h / 2, tuple(s + h / 2 * k for s, k in zip(state, k1)))
        k3 = func(t + h / 2, tuple(s + h / 2 * k for s, k in zip(state, k2)))
        k4 = func(t + h, tuple(s + h * k for s, k in zip(state, k3)))
        state = tuple(s + h / 6 * (a + 2 * b + 2 * c + d) for s, a, b, c, d in zip(state, k1, k2, k3, k4))
        t = t + h
    return state


class CNF(nn.Module):
    def __init__(self, odefunc, T=1.0, steps=3):
        super().__init__()
        self.odefunc, self.T, self.steps = odefunc, T, steps

    def forward(self, z, logpz=None, e=None, reverse=False):
        if logpz is None:
            logpz = torch.zeros(z.shape[0], 1)
        self.odefunc.before_odeint(e=e)
        zero = torch.zeros(z.shape[0], 1)
        t0, t1 = (self.T, 0.0) if reverse else (0.0, self.T)
        z_t, logpz_t, kin, frob = odeint_rk4(self.odefunc, (z, logpz, zero, zero), t0, t1, self.steps)
        return z_t, logpz_t, kin, frob


def sample_8gaussians(rng, batch_size):
    scale = 2.
    centers = [(1, 0), (-1, 0), (0, 1), (0, -1), (1. / np.sqrt(2), 1. / np.sqrt(2)),
               (1. / np.sqrt(2), -1. / np.sqrt(2)), (-1. / np.sqrt(2), 1. / np.sqrt(2)),
               (-1. / np.sqrt(2), -1. / np.sqrt(2))]
    centers = scale * np.array(centers)
    pts = rng.standard_normal((batch_size, 2)) * 0.5 + centers[rng.integers(0, 8, batch_size)]
    return (pts / 1.414).astype(np.float32)


rng = np.random.default_rng(0)
diffeq = ODEnet((32, 32), 2); sync(diffeq)
odefunc = ODEfunc(comp(diffeq, dynamic=True, fullgraph=True))
model = CNF(odefunc)
base = torch.distributions.Independent(torch.distributions.Normal(torch.zeros(2), torch.ones(2)), 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
LOSSES = []
model.train()
for itr in range(3):
    x = torch.from_numpy(sample_8gaussians(rng, 64))
    e = torch.from_numpy((rng.integers(0, 2, x.shape) * 2 - 1).astype(np.float32))
    z, delta_logp, kinetic, frobenius = model(x, torch.zeros(x.shape[0], 1), e=e)
    logpx = base.log_prob(z).view(-1, 1) - delta_logp
    nll = -logpx.mean()
    loss = nll + 0.01 * kinetic.mean() + 0.01 * frobenius.mean()
    optimizer.zero_grad()
    loss.backward()
    gn = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    scheduler.step()
    LOSSES += [nll.item(), kinetic.mean().item(), gn.item(), int(odefunc._num_evals.item())]
model.eval()
with torch.no_grad():
    z = torch.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))
    x_gen = model(z, reverse=True)[0]
LOSSES += [x_gen.abs().mean().item(), x_gen.std().item()]
