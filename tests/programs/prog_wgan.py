from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.autograd as autograd
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(16, 64), nn.LeakyReLU(0.2, inplace=True), nn.Linear(64, 64), nn.BatchNorm1d(64, 0.8), nn.LeakyReLU(0.2), nn.Linear(64, 32), nn.Tanh())
D = nn.Sequential(nn.Linear(32, 64), nn.LeakyReLU(0.2, inplace=True), nn.Linear(64, 32), nn.LeakyReLU(0.2, inplace=True), nn.Linear(32, 1))
sync(G, D)
optG = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.999))
r = np.random.default_rng(0)
def gp(D, real, fake, alpha):
    interp = (alpha * real + ((1 - alpha) * fake)).requires_grad_(True)
    d_interp = D(interp)
    fake_out = torch.ones(real.shape[0], 1).requires_grad_(False)
    gradients = autograd.grad(outputs=d_interp, inputs=interp, grad_outputs=fake_out, create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.view(gradients.size(0), -1)
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()
LOSSES = []
for i in range(4):
    real = torch.from_numpy(r.standard_normal((16, 32)).astype(np.float32))
    z = torch.from_numpy(r.standard_normal((16, 16)).astype(np.float32))
    alpha = torch.from_numpy(r.random((16, 1)).astype(np.float32))
    optD.zero_grad()
    fake = G(z)
    d_loss = -torch.mean(D(real)) + torch.mean(D(fake.detach())) + 10 * gp(D, real.data, fake.data, alpha)
    d_loss.backward(); optD.step()
    for p in D.parameters(): p.data.clamp_(-0.5, 0.5)
    optG.zero_grad()
    g_loss = -torch.mean(D(G(z)))
    g_loss.backward(); optG.step()
    LOSSES += [d_loss.item(), g_loss.item()]
