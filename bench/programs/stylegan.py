"""StyleGAN2's generator and discriminator (Karras et al. 2020) as rosinality/stylegan2-pytorch
writes them, at 32x32.

A mapping network of four equalized-lr linears (lr_mul 0.01, fused leaky ReLU * sqrt(2));
a synthesis network from a learned 4x4 constant of modulated 3x3 convs (width 64): the
style scales the weight per sample, demodulation by rsqrt of the summed squares, the batch
folded into the channels for one ``conv2d(groups=batch)``, nearest upsampling, noise
injection with a learned strength, toRGB skips; a discriminator of equalized convs with
average pooling and a minibatch-stddev feature. One step (batch 8): the discriminator's
logistic loss on real and fake images, then its R1 penalty by ``autograd.grad(create_graph)``
on the reals, then the generator's non-saturating loss; two Adams with betas (0, 0.99),
``requires_grad`` toggled per phase. Noise comes from numpy. Compiled: both networks.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "stylegan"
BATCH, SIZE, CH, STYLE = 8, 32, 64, 64


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias_init=0, lr_mul=1, activation=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, input):
        if self.activation:
            out = F.linear(input, self.weight * self.scale)
            return F.leaky_relu(out + self.bias * self.lr_mul, 0.2) * math.sqrt(2)
        return F.linear(input, self.weight * self.scale, bias=self.bias * self.lr_mul)


class EqualConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, padding=0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channel, in_channel, kernel_size, kernel_size))
        self.scale = 1 / math.sqrt(in_channel * kernel_size ** 2)
        self.padding = padding
        self.bias = nn.Parameter(torch.zeros(out_channel))

    def forward(self, input):
        return F.conv2d(input, self.weight * self.scale, bias=self.bias, padding=self.padding)


class ModulatedConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, style_dim, demodulate=True, upsample=False):
        super().__init__()
        self.kernel_size, self.in_channel, self.out_channel = kernel_size, in_channel, out_channel
        self.upsample, self.demodulate = upsample, demodulate
        self.scale = 1 / math.sqrt(in_channel * kernel_size ** 2)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)

    def forward(self, input, style):
        batch, in_channel, height, width = input.shape
        style = self.modulation(style).view(batch, 1, in_channel, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.out_channel, 1, 1, 1)
        weight = weight.view(batch * self.out_channel, in_channel, self.kernel_size, self.kernel_size)
        if self.upsample:
            input = F.interpolate(input, scale_factor=2, mode="nearest")
        input = input.view(1, batch * in_channel, input.shape[2], input.shape[3])
        out = F.conv2d(input, weight, padding=self.padding, groups=batch)
        return out.view(batch, self.out_channel, out.shape[2], out.shape[3])


class StyledConv(nn.Module):
    def __init__(self, in_channel, out_channel, style_dim, upsample=False):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, 3, style_dim, upsample=upsample)
        self.noise_weight = nn.Parameter(torch.zeros(1))
        self.bias = nn.Parameter(torch.zeros(out_channel))

    def forward(self, input, style, noise):
        out = self.conv(input, style) + self.noise_weight * noise
        return F.leaky_relu(out + self.bias.view(1, -1, 1, 1), 0.2) * math.sqrt(2)


class ToRGB(nn.Module):
    def __init__(self, in_channel, style_dim):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, input, style, skip=None):
        out = self.conv(input, style) + self.bias
        return out if skip is None else out + F.interpolate(skip, scale_factor=2, mode="nearest")


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.style = nn.Sequential(*[EqualLinear(STYLE, STYLE, lr_mul=0.01, activation=True) for _ in range(4)])
        self.input = nn.Parameter(torch.randn(1, CH, 4, 4))
        self.conv1 = StyledConv(CH, CH, STYLE)
        self.to_rgb1 = ToRGB(CH, STYLE)
        self.convs, self.to_rgbs = nn.ModuleList(), nn.ModuleList()
        for _ in range(3, int(math.log2(SIZE)) + 1):
            self.convs.append(StyledConv(CH, CH, STYLE, upsample=True))
            self.convs.append(StyledConv(CH, CH, STYLE))
            self.to_rgbs.append(ToRGB(CH, STYLE))

    def forward(self, z, noise):
        z = z * torch.rsqrt(torch.mean(z ** 2, dim=1, keepdim=True) + 1e-8)
        latent = self.style(z)
        out = self.conv1(self.input.repeat(z.shape[0], 1, 1, 1), latent, noise[0])
        skip = self.to_rgb1(out, latent)
        for i, to_rgb in enumerate(self.to_rgbs):
            out = self.convs[2 * i](out, latent, noise[2 * i + 1])
            out = self.convs[2 * i + 1](out, latent, noise[2 * i + 2])
            skip = to_rgb(out, latent, skip)
        return skip


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [EqualConv2d(3, CH, 1), nn.LeakyReLU(0.2)]
        for _ in range(int(math.log2(SIZE)) - 2):
            layers += [EqualConv2d(CH, CH, 3, padding=1), nn.LeakyReLU(0.2), nn.AvgPool2d(2)]
        self.convs = nn.Sequential(*layers)
        self.final_conv = EqualConv2d(CH + 1, CH, 3, padding=1)
        self.final_linear = nn.Sequential(EqualLinear(CH * 16, CH, activation=True), EqualLinear(CH, 1))

    def forward(self, input):
        out = self.convs(input)
        batch, channel, height, width = out.shape
        group = min(batch, 4)
        stddev = out.view(group, -1, 1, channel, height, width)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdims=True).squeeze(2).repeat(group, 1, height, width)
        out = F.leaky_relu(self.final_conv(torch.cat([out, stddev], 1)), 0.2) * math.sqrt(2)
        return self.final_linear(out.view(batch, -1))


def requires_grad(model, flag):
    for p in model.parameters():
        p.requires_grad = flag


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.generator, self.discriminator = Generator(), Discriminator()
        load_params(NAME, self.generator, self.discriminator)
        self.g_optim = torch.optim.Adam(self.generator.parameters(), lr=2e-3, betas=(0.0, 0.99))
        self.d_optim = torch.optim.Adam(self.discriminator.parameters(), lr=2e-3, betas=(0.0, 0.99))
        self.G, self.D = compile(self.generator), compile(self.discriminator)

    def _t(self, *shape):
        return torch.from_numpy(self.r.standard_normal(shape).astype("float32"))

    def _noise(self):
        sizes = [4] + [s for s in (2 ** k for k in range(3, int(math.log2(SIZE)) + 1)) for _ in range(2)]
        return [self._t(BATCH, 1, s, s) for s in sizes]

    def step(self) -> float:
        real = torch.tanh(self._t(BATCH, 3, SIZE, SIZE))
        requires_grad(self.generator, False)
        requires_grad(self.discriminator, True)
        fake_pred = self.D(self.G(self._t(BATCH, STYLE), self._noise()))
        d_loss = F.softplus(fake_pred).mean() + F.softplus(-self.D(real)).mean()
        self.discriminator.zero_grad()
        d_loss.backward()
        self.d_optim.step()
        real.requires_grad = True
        real_pred = self.D(real)
        grad_real, = torch.autograd.grad(outputs=real_pred.sum(), inputs=real, create_graph=True)
        r1_loss = grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
        self.discriminator.zero_grad()
        (10.0 / 2 * r1_loss + 0 * real_pred[0]).backward()
        self.d_optim.step()
        requires_grad(self.generator, True)
        requires_grad(self.discriminator, False)
        g_loss = F.softplus(-self.D(self.G(self._t(BATCH, STYLE), self._noise()))).mean()
        self.generator.zero_grad()
        g_loss.backward()
        self.g_optim.step()
        return d_loss.item() + g_loss.item()
