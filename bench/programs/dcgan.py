"""A DCGAN training step as pytorch/examples' dcgan writes it, at 32x32.

Generator: ``ConvTranspose2d`` 4x4 (stride 1, then 2) + BatchNorm2d + ReLU(inplace) from
a 100-d code to a 3x32x32 image, Tanh; discriminator: Conv2d 4x4 stride 2 +
BatchNorm2d + LeakyReLU(0.2, inplace) down to one probability, Sigmoid; BCELoss, one
Adam(2e-4, betas (0.5, 0.999)) per network; the discriminator's update on a real and a
fake batch (``fake.detach()``), then the generator's. Width 32, batch 32; images and
codes drawn with numpy. Compiled: both networks.
"""
import torch
import torch.nn as nn
import torch.optim as optim

from .common import load_params, rng

NAME = "dcgan"
nz, ngf, ndf, nc, BATCH = 100, 32, 32, 3, 32
real_label, fake_label = 1.0, 0.0


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.uniform(-1, 1, (BATCH, nc, 32, 32)).astype("float32")),
                         torch.from_numpy(r.standard_normal((BATCH, nz, 1, 1), dtype="float32")))
                        for _ in range(4)]
        self.netG, self.netD = Generator(), Discriminator()
        load_params(NAME, self.netG, self.netD)
        self.criterion = nn.BCELoss()
        self.optimizerD = optim.Adam(self.netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
        self.optimizerG = optim.Adam(self.netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
        self.G, self.D = compile(self.netG), compile(self.netD)
        self.i = 0

    def step(self) -> float:
        real_cpu, noise = self.batches[self.i % len(self.batches)]
        self.i += 1
        batch_size = real_cpu.size(0)
        self.netD.zero_grad()
        label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
        output = self.D(real_cpu)
        errD_real = self.criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()
        fake = self.G(noise)
        label.fill_(fake_label)
        output = self.D(fake.detach())
        errD_fake = self.criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        self.optimizerD.step()
        self.netG.zero_grad()
        label.fill_(real_label)
        output = self.D(fake)
        errG = self.criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        self.optimizerG.step()
        self.stats = (D_x, D_G_z1, D_G_z2)   # what the example prints each step
        return errD.item() + errG.item()
