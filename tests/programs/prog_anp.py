from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from torch.distributions import Independent, Normal, kl_divergence
torch.manual_seed(0)
# An attentive neural process (the deepmind/neural-processes notebook as its PyTorch ports
# write it), scaled down: 1-D GP curves drawn in numpy (squared-exponential kernel,
# Cholesky) with a random number of context and target points each step, a latent path
# (mean-aggregated MLP codes to a Normal with sigma = 0.1 + 0.9 * sigmoid), a deterministic
# path of MultiheadAttention from target to context x, a decoder Normal with a softplus
# scale; the loss is -log_prob + KL(posterior || prior) between Independent Normals with
# z drawn by the reparameterization (its noise from numpy), compiled with dynamic=True


class LatentEncoder(nn.Module):
    def __init__(self, x_dim, y_dim, hidden, latent):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(x_dim + y_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, hidden))
        self.penultimate = nn.Linear(hidden, (hidden + latent) // 2)
        self.mean = nn.Linear((hidden + latent) // 2, latent)
        self.log_sigma = nn.Linear((hidden + latent) // 2, latent)

    def forward(self, x, y):
        hidden = self.mlp(torch.cat([x, y], dim=-1)).mean(dim=1)
        hidden = torch.relu(self.penultimate(hidden))
        mu = self.mean(hidden)
        sigma = 0.1 + 0.9 * torch.sigmoid(self.log_sigma(hidden))
        return Independent(Normal(loc=mu, scale=sigma), 1)


class DeterministicEncoder(nn.Module):
    def __init__(self, x_dim, y_dim, hidden, heads=4):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(x_dim + y_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.key = nn.Linear(x_dim, hidden)
        self.query = nn.Linear(x_dim, hidden)
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True)

    def forward(self, context_x, context_y, target_x):
        r = self.mlp(torch.cat([context_x, context_y], dim=-1))
        out, _ = self.attention(self.query(target_x), self.key(context_x), r, need_weights=False)
        return out


class Decoder(nn.Module):
    def __init__(self, x_dim, y_dim, hidden, latent):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(x_dim + hidden + latent, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2 * y_dim))

    def forward(self, representation, target_x):
        hidden = self.mlp(torch.cat([representation, target_x], dim=-1))
        mu, log_sigma = torch.chunk(hidden, 2, dim=-1)
        sigma = 0.1 + 0.9 * nn.functional.softplus(log_sigma)
        return Normal(loc=mu, scale=sigma)


class LatentModel(nn.Module):
    def __init__(self, x_dim=1, y_dim=1, hidden=32, latent=16):
        super().__init__()
        self.latent_encoder = LatentEncoder(x_dim, y_dim, hidden, latent)
        self.deterministic_encoder = DeterministicEncoder(x_dim, y_dim, hidden)
        self.decoder = Decoder(x_dim, y_dim, hidden, latent)

    def forward(self, context_x, context_y, target_x, target_y=None, eps=None):
        prior = self.latent_encoder(context_x, context_y)
        if target_y is not None:
            posterior = self.latent_encoder(target_x, target_y)
            z = posterior.mean + posterior.stddev * eps
        else:
            z = prior.mean
        z = z.unsqueeze(1).repeat(1, target_x.size(1), 1)
        r = self.deterministic_encoder(context_x, context_y, target_x)
        dist = self.decoder(torch.cat([r, z], dim=-1), target_x)
        if target_y is not None:
            log_p = dist.log_prob(target_y).sum(-1).mean()
            kl = kl_divergence(posterior, prior).mean()
            loss = -log_p + kl / target_x.size(1)
        else:
            log_p, kl, loss = None, None, None
        return dist.mean, dist.stddev, log_p, kl, loss


class GPCurvesReader:
    def __init__(self, batch_size, max_num_context, l1_scale=0.4, sigma_scale=1.0, seed=0):
        self._batch_size, self._max_num_context = batch_size, max_num_context
        self._l1_scale, self._sigma_scale = l1_scale, sigma_scale
        self.rng = np.random.default_rng(seed)

    def _gaussian_kernel(self, xdata, sigma_noise=2e-2):
        diff = xdata[:, None, :] - xdata[:, :, None]
        norm = np.square(diff / self._l1_scale)
        kernel = np.square(self._sigma_scale) * np.exp(-0.5 * norm)
        return kernel + (sigma_noise ** 2) * np.eye(xdata.shape[1])

    def generate_curves(self, testing=False):
        num_context = int(self.rng.integers(3, self._max_num_context))
        if testing:
            num_target = 40
            x_values = np.tile(np.linspace(-2., 2., num_target)[None], (self._batch_size, 1))
        else:
            num_target = int(self.rng.integers(2, self._max_num_context))
            x_values = self.rng.uniform(-2, 2, (self._batch_size, num_context + num_target))
        cholesky = np.linalg.cholesky(self._gaussian_kernel(x_values))
        y_values = np.einsum('bij,bj->bi', cholesky, self.rng.standard_normal(x_values.shape))
        to = lambda a: torch.from_numpy(a[..., None].astype(np.float32))
        if testing:
            idx = self.rng.permutation(num_target)[:num_context]
            return to(x_values[:, idx]), to(y_values[:, idx]), to(x_values), to(y_values)
        return to(x_values[:, :num_context]), to(y_values[:, :num_context]), to(x_values), to(y_values)


model = LatentModel(); sync(model)
net = comp(model, dynamic=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
reader = GPCurvesReader(batch_size=8, max_num_context=12)
noise = np.random.default_rng(1)
LOSSES = []
for it in range(4):
    context_x, context_y, target_x, target_y = reader.generate_curves()
    eps = torch.from_numpy(noise.standard_normal((8, 16)).astype(np.float32))
    mu, sigma, log_p, kl, loss = net(context_x, context_y, target_x, target_y, eps)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss.item(), log_p.item(), kl.item()]
model.eval()
with torch.no_grad():
    context_x, context_y, target_x, target_y = reader.generate_curves(testing=True)
    mu, sigma, _, _, _ = net(context_x, context_y, target_x)
LOSSES += [mu.mean().item(), sigma.mean().item(), ((mu - target_y) ** 2).mean().item()]
