"""HiFi-GAN's training step (jik876/hifi-gan, models.py and train.py) at small width.

Generator: a weight-normed Conv1d from 80 mel bins, three weight-normed
``ConvTranspose1d`` upsamplings (x8, x8, x4) each followed by multi-receptive-field
fusion (three ResBlock1 of kernels 3/7/11, dilations 1/3/5, leaky ReLU 0.1, averaged),
tanh. A multi-period discriminator (periods 2, 3, 5, 7, 11): reflect pad, reshape by the
period into 2-D, weight-normed (k, 1) ``Conv2d`` stacks keeping feature maps. One step
is the discriminator's LSGAN loss on real and detached fake audio, then the generator's
adversarial, feature-matching L1 and an L1 on log STFT-magnitude "mel" features (a fixed
projection of ``torch.stft``, the repo's mel basis being librosa's), two AdamWs with
ExponentialLR. Batch 2 of 32 frames (8192 samples). Compiled: generator and discriminator.
"""
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Conv1d, Conv2d, ConvTranspose1d
from torch.nn.utils import weight_norm

from .common import load_params, rng

NAME = "hifigan"
LRELU_SLOPE = 0.1
BATCH, FRAMES, MELS, HOP = 2, 32, 80, 256


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(nn.Module):
    def __init__(self, channels, kernel_size=3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList([weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                                        padding=get_padding(kernel_size, d))) for d in dilation])
        self.convs2 = nn.ModuleList([weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                                        padding=get_padding(kernel_size, 1))) for _ in dilation])

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x


class Generator(nn.Module):
    def __init__(self, upsample_rates=(8, 8, 4), upsample_kernel_sizes=(16, 16, 8), upsample_initial_channel=128,
                 resblock_kernel_sizes=(3, 7, 11), resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5))):
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.conv_pre = weight_norm(Conv1d(MELS, upsample_initial_channel, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)):
            self.ups.append(weight_norm(ConvTranspose1d(upsample_initial_channel // (2 ** i),
                                                        upsample_initial_channel // (2 ** (i + 1)),
                                                        k, u, padding=(k - u) // 2)))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = upsample_initial_channel // (2 ** (i + 1))
            for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(ResBlock1(ch, k, d))
        self.conv_post = weight_norm(Conv1d(ch, 1, 7, 1, padding=3))

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = self.ups[i](x)
            xs = None
            for j in range(self.num_kernels):
                if xs is None:
                    xs = self.resblocks[i * self.num_kernels + j](x)
                else:
                    xs += self.resblocks[i * self.num_kernels + j](x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        return torch.tanh(x)


class DiscriminatorP(nn.Module):
    def __init__(self, period, kernel_size=5, stride=3):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([
            weight_norm(Conv2d(1, 16, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            weight_norm(Conv2d(16, 32, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            weight_norm(Conv2d(32, 64, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            weight_norm(Conv2d(64, 64, (kernel_size, 1), 1, padding=(2, 0))),
        ])
        self.conv_post = weight_norm(Conv2d(64, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []
        b, c, t = x.shape
        if t % self.period != 0:  # pad first
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for l in self.convs:
            x = F.leaky_relu(l(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorP(p) for p in (2, 3, 5, 7, 11)])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        loss += torch.mean((1 - dr) ** 2) + torch.mean(dg ** 2)
    return loss


def generator_loss(disc_outputs):
    loss = 0
    for dg in disc_outputs:
        loss += torch.mean((1 - dg) ** 2)
    return loss


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        n_fft = 1024
        self.window = torch.hann_window(n_fft)
        self.mel_basis = torch.from_numpy(abs(r.standard_normal((MELS, n_fft // 2 + 1))).astype("float32") / 32)
        self.batches = [(torch.from_numpy(r.standard_normal((BATCH, MELS, FRAMES)).astype("float32")),
                         torch.from_numpy((r.uniform(-0.5, 0.5, (BATCH, 1, FRAMES * HOP))).astype("float32")))
                        for _ in range(4)]
        self.generator, self.mpd = Generator(), MultiPeriodDiscriminator()
        load_params(NAME, self.generator, self.mpd)
        self.optim_g = torch.optim.AdamW(self.generator.parameters(), 2e-4, betas=[0.8, 0.99])
        self.optim_d = torch.optim.AdamW(itertools.chain(self.mpd.parameters()), 2e-4, betas=[0.8, 0.99])
        self.scheduler_g = torch.optim.lr_scheduler.ExponentialLR(self.optim_g, gamma=0.999)
        self.scheduler_d = torch.optim.lr_scheduler.ExponentialLR(self.optim_d, gamma=0.999)
        self.G, self.D = compile(self.generator), compile(self.mpd)
        self.i = 0

    def mel(self, y, n_fft=1024, hop_size=HOP, win_size=1024):
        y = F.pad(y.unsqueeze(1), (int((n_fft - hop_size) / 2), int((n_fft - hop_size) / 2)), mode="reflect")
        spec = torch.stft(y.squeeze(1), n_fft, hop_length=hop_size, win_length=win_size, window=self.window,
                          center=False, pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        spec = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
        return torch.log(torch.clamp(torch.matmul(self.mel_basis, spec), min=1e-5))

    def step(self) -> float:
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        y_mel = self.mel(y.squeeze(1))
        y_g_hat = self.G(x)
        y_g_hat_mel = self.mel(y_g_hat.squeeze(1))
        self.optim_d.zero_grad()
        y_df_hat_r, y_df_hat_g, _, _ = self.D(y, y_g_hat.detach())
        loss_disc_all = discriminator_loss(y_df_hat_r, y_df_hat_g)
        loss_disc_all.backward()
        self.optim_d.step()
        self.optim_g.zero_grad()
        loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45
        y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = self.D(y, y_g_hat)
        loss_gen_all = generator_loss(y_df_hat_g) + feature_loss(fmap_f_r, fmap_f_g) + loss_mel
        loss_gen_all.backward()
        self.optim_g.step()
        self.scheduler_g.step()
        self.scheduler_d.step()
        return loss_gen_all.item() + loss_disc_all.item()
