"""ESRGAN (Wang et al.) training, as BasicSR's RRDBNet, VGG-style discriminator and
ESRGANModel write it.

A 24x24 crop to 96x96, batch 4: RRDBNet of 2 residual-in-residual dense blocks (32
features, growth 16; each conv reads the concatenation of every earlier output, residual
scaling by 0.2, in-place LeakyReLU), x4 upsampling by nearest interpolate; a discriminator
of strided convs with BatchNorm. One step: the generator under L1 plus the relativistic
average GAN loss (the discriminator frozen by requires_grad), then the discriminator on
real and detached fake; two Adams. Compiled: both networks.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "esrgan"
BATCH, LR_SIZE, FEAT, GROW = 4, 24, 32, 16


class ResidualDenseBlock(nn.Module):
    def __init__(self, num_feat, num_grow_ch):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_grow_ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat + num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv3 = nn.Conv2d(num_feat + 2 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv4 = nn.Conv2d(num_feat + 3 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv5 = nn.Conv2d(num_feat + 4 * num_grow_ch, num_feat, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, num_feat, num_grow_ch):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb2 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb3 = ResidualDenseBlock(num_feat, num_grow_ch)

    def forward(self, x):
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, num_block=2):
        super().__init__()
        self.conv_first = nn.Conv2d(3, FEAT, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(FEAT, GROW) for _ in range(num_block)])
        self.conv_body = nn.Conv2d(FEAT, FEAT, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(FEAT, FEAT, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(FEAT, FEAT, 3, 1, 1)
        self.conv_hr = nn.Conv2d(FEAT, FEAT, 3, 1, 1)
        self.conv_last = nn.Conv2d(FEAT, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode='nearest')))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode='nearest')))
        return self.conv_last(self.lrelu(self.conv_hr(feat)))


class VGGStyleDiscriminator(nn.Module):
    def __init__(self, num_feat=16):
        super().__init__()
        layers, ch = [nn.Conv2d(3, num_feat, 3, 1, 1), nn.LeakyReLU(0.2, True)], num_feat
        for out in (num_feat, 2 * num_feat, 2 * num_feat, 4 * num_feat):
            layers += [nn.Conv2d(ch, out, 4, 2, 1, bias=False), nn.BatchNorm2d(out), nn.LeakyReLU(0.2, True)]
            ch = out
        self.features = nn.Sequential(*layers)
        self.linear1 = nn.Linear(ch * (LR_SIZE * 4 // 16) ** 2, 64)
        self.linear2 = nn.Linear(64, 1)

    def forward(self, x):
        feat = self.features(x).view(x.size(0), -1)
        return self.linear2(F.leaky_relu(self.linear1(feat), 0.2))


def gan_loss(pred, target_is_real):
    return F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, 1.0 if target_is_real else 0.0))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.net_g, self.net_d = RRDBNet(), VGGStyleDiscriminator()
        load_params(NAME, self.net_g, self.net_d)
        self.opt_g = torch.optim.Adam(self.net_g.parameters(), lr=1e-4, betas=(0.9, 0.99))
        self.opt_d = torch.optim.Adam(self.net_d.parameters(), lr=1e-4, betas=(0.9, 0.99))
        self.g, self.d = compile(self.net_g), compile(self.net_d)

    def step(self) -> float:
        gt = torch.from_numpy(self.r.random((BATCH, 3, LR_SIZE * 4, LR_SIZE * 4), dtype=np.float32))
        lq = F.avg_pool2d(gt, 4)
        for p in self.net_d.parameters():
            p.requires_grad = False
        self.opt_g.zero_grad()
        output = self.g(lq)
        real_d_pred = self.d(gt).detach()
        fake_g_pred = self.d(output)
        l_g_gan = (gan_loss(real_d_pred - fake_g_pred.mean(), False) + gan_loss(fake_g_pred - real_d_pred.mean(), True)) / 2
        l_g = F.l1_loss(output, gt) + 5e-3 * l_g_gan
        l_g.backward()
        self.opt_g.step()
        for p in self.net_d.parameters():
            p.requires_grad = True
        self.opt_d.zero_grad()
        fake_d_pred = self.d(output.detach())
        real_d_pred = self.d(gt)
        l_d = (gan_loss(real_d_pred - fake_d_pred.detach().mean(), True)
               + gan_loss(fake_d_pred - real_d_pred.detach().mean(), False)) / 2
        l_d.backward()
        self.opt_d.step()
        return l_g.item() + l_d.item()
