"""A DCGAN written as pytorch/examples writes it, run by changing only the imports.

Generator: ConvTranspose2d + BatchNorm2d + ReLU(inplace) from a 100-d code to a 3x64x64
image; discriminator: Conv2d + BatchNorm2d + LeakyReLU(0.2, inplace) down to one
probability; BCELoss, Adam(0.0002, betas (0.5, 0.999)), the DCGAN weight init, the
alternating D and G updates. The "images" are random noise (no dataset download): the
program shows the port runs and the losses move, not a trained GAN.

Run:  python examples/dcgan.py [--steps N] [--batch B]
"""
import argparse
import time

import tracejit as torch
import tracejit.nn as nn
import tracejit.optim as optim

nz, ngf, ndf, nc = 100, 64, 64, 3


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
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
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 8), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    optD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
    real = torch.rand(args.batch, nc, 64, 64) * 2 - 1
    losses = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        netD.zero_grad()
        label = torch.full((args.batch,), 1.0)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        fake = netG(torch.randn(args.batch, nz, 1, 1))
        label.fill_(0.0)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        optD.step()
        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion(netD(fake), label)
        errG.backward()
        optG.step()
        losses.append((float(errD_real + errD_fake), float(errG)))
        print(f"step {i}: loss_D {losses[-1][0]:.4f} loss_G {losses[-1][1]:.4f} "
              f"({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    return losses


if __name__ == "__main__":
    main()
