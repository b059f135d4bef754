from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils import spectral_norm
torch.manual_seed(0)
# SNGAN (Miyato et al. 2018) as the common PyTorch ports write it, scaled down: a
# ConvTranspose2d generator with BatchNorm, a discriminator whose every layer is wrapped in
# spectral_norm (one power iteration per forward in training), hinge losses, Adam with
# betas (0.0, 0.9) for both, n_dis discriminator steps per generator step; the last layer
# uses the parametrizations form, the class-conditional projection discriminator's embedding
class Generator(nn.Module):
    def __init__(self, z_dim=16, ngf=16):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(z_dim, ngf * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())
    def forward(self, z):
        return self.main(z.view(z.size(0), -1, 1, 1))
class Discriminator(nn.Module):
    def __init__(self, ndf=16, n_classes=4):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            spectral_norm(nn.Conv2d(3, ndf, 3, 1, 1)), nn.LeakyReLU(0.1),
            spectral_norm(nn.Conv2d(ndf, ndf, 4, 2, 1)), nn.LeakyReLU(0.1),
            spectral_norm(nn.Conv2d(ndf, ndf * 2, 3, 1, 1)), nn.LeakyReLU(0.1),
            spectral_norm(nn.Conv2d(ndf * 2, ndf * 2, 4, 2, 1)), nn.LeakyReLU(0.1))
        self.linear = spectral_norm(nn.Linear(ndf * 2 * 4 * 4, 1))
        self.embed = nn.utils.parametrizations.spectral_norm(nn.Embedding(n_classes, ndf * 2 * 4 * 4))
    def forward(self, x, y):
        h = self.main(x)
        h = torch.flatten(h, start_dim=1)
        out = self.linear(h)
        return out + torch.sum(self.embed(y) * h, dim=1, keepdim=True)
netG, netD = Generator(), Discriminator(); sync(netG, netD)
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.0, 0.9))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.0, 0.9))
G, D = comp(netG), comp(netD)
r = np.random.default_rng(0)
n_dis, batch_size = 2, 6
def noise():
    return torch.from_numpy(r.standard_normal((batch_size, 16)).astype(np.float32))
LOSSES = []
for step in range(3):
    for _ in range(n_dis):
        real = torch.from_numpy(np.tanh(r.standard_normal((batch_size, 3, 16, 16))).astype(np.float32))
        y = torch.from_numpy(r.integers(0, 4, batch_size))
        with torch.no_grad():
            fake = G(noise()).detach()
        loss_D = F.relu(1.0 - D(real, y)).mean() + F.relu(1.0 + D(fake, y)).mean()
        optD.zero_grad()
        loss_D.backward()
        optD.step()
    y = torch.from_numpy(r.integers(0, 4, batch_size))
    loss_G = -D(G(noise()), y).mean()
    optG.zero_grad()
    loss_G.backward()
    optG.step()
    LOSSES += [loss_D.item(), loss_G.item()]
# the power iteration's vectors and the normalized weight's top singular value (about 1)
sn = netD.main[0]
LOSSES += [sn.weight_u.norm().item(), torch.linalg.matrix_norm(sn.weight.flatten(1), ord=2).item()]
LOSSES.append(torch.linalg.matrix_norm(netD.embed.weight, ord=2).item())
netG.eval(); netD.eval()
with torch.no_grad():
    LOSSES.append(D(G(noise()), torch.arange(batch_size) % 4).mean().item())
