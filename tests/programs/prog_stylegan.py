from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# StyleGAN2 (Karras et al. 2020) as rosinality/stylegan2-pytorch writes it, scaled down: a
# mapping network of equalized-lr linears (weights scaled by 1/sqrt(fan_in) at run time,
# lr_mul), modulated 3x3 convs (style-scaled weights, demodulation by rsqrt of the summed
# squares, the batch folded into groups: conv2d(groups=batch)), noise injection with a
# learned per-channel strength, bias + leaky ReLU(0.2) * sqrt(2), nearest upsampling, toRGB
# skips; a discriminator of equalized convs with a minibatch-stddev feature; the
# non-saturating logistic loss (softplus) and the R1 penalty by autograd.grad with
# create_graph on real images every other step; two Adams. The noise is drawn from a numpy
# generator and passed in (the frameworks' generators differ)
class PixelNorm(nn.Module):
    def forward(self, input):
        return input * torch.rsqrt(torch.mean(input ** 2, dim=1, keepdim=True) + 1e-8)
class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True, bias_init=0, lr_mul=1, activation=None):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init)) if bias else None
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul
    def forward(self, input):
        if self.activation:
            out = F.linear(input, self.weight * self.scale)
            out = F.leaky_relu(out + self.bias * self.lr_mul, negative_slope=0.2) * math.sqrt(2)
        else:
            out = F.linear(input, self.weight * self.scale, bias=self.bias * self.lr_mul)
        return out
class EqualConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, stride=1, padding=0, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_channel, in_channel, kernel_size, kernel_size))
        self.scale = 1 / math.sqrt(in_channel * kernel_size ** 2)
        self.stride, self.padding = stride, padding
        self.bias = nn.Parameter(torch.zeros(out_channel)) if bias else None
    def forward(self, input):
        return F.conv2d(input, self.weight * self.scale, bias=self.bias, stride=self.stride, padding=self.padding)
class ModulatedConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, style_dim, demodulate=True, upsample=False):
        super().__init__()
        self.eps = 1e-8
        self.kernel_size, self.in_channel, self.out_channel = kernel_size, in_channel, out_channel
        self.upsample = upsample
        fan_in = in_channel * kernel_size ** 2
        self.scale = 1 / math.sqrt(fan_in)
        self.padding = kernel_size // 2
        self.weight = nn.Parameter(torch.randn(1, out_channel, in_channel, kernel_size, kernel_size))
        self.modulation = EqualLinear(style_dim, in_channel, bias_init=1)
        self.demodulate = demodulate
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
        _, _, height, width = out.shape
        return out.view(batch, self.out_channel, height, width)
class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
    def forward(self, image, noise):
        return image + self.weight * noise
class FusedLeakyReLU(nn.Module):
    def __init__(self, channel, negative_slope=0.2, scale=2 ** 0.5):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channel))
        self.negative_slope, self.scale = negative_slope, scale
    def forward(self, input):
        rest_dim = [1] * (input.ndim - self.bias.ndim - 1)
        return F.leaky_relu(input + self.bias.view(1, self.bias.shape[0], *rest_dim),
                            negative_slope=self.negative_slope) * self.scale
class StyledConv(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, style_dim, upsample=False):
        super().__init__()
        self.conv = ModulatedConv2d(in_channel, out_channel, kernel_size, style_dim, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate = FusedLeakyReLU(out_channel)
    def forward(self, input, style, noise):
        out = self.conv(input, style)
        out = self.noise(out, noise=noise)
        return self.activate(out)
class ToRGB(nn.Module):
    def __init__(self, in_channel, style_dim, upsample=True):
        super().__init__()
        self.upsample = upsample
        self.conv = ModulatedConv2d(in_channel, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))
    def forward(self, input, style, skip=None):
        out = self.conv(input, style) + self.bias
        if skip is not None:
            out = out + F.interpolate(skip, scale_factor=2, mode="nearest")
        return out
class Generator(nn.Module):
    def __init__(self, size=16, style_dim=32, n_mlp=3, channel=16, lr_mlp=0.01):
        super().__init__()
        self.style_dim = style_dim
        layers = [PixelNorm()]
        for i in range(n_mlp):
            layers.append(EqualLinear(style_dim, style_dim, lr_mul=lr_mlp, activation="fused_lrelu"))
        self.style = nn.Sequential(*layers)
        self.input = nn.Parameter(torch.randn(1, channel, 4, 4))
        self.conv1 = StyledConv(channel, channel, 3, style_dim)
        self.to_rgb1 = ToRGB(channel, style_dim, upsample=False)
        self.log_size = int(math.log(size, 2))
        self.convs, self.to_rgbs = nn.ModuleList(), nn.ModuleList()
        for i in range(3, self.log_size + 1):
            self.convs.append(StyledConv(channel, channel, 3, style_dim, upsample=True))
            self.convs.append(StyledConv(channel, channel, 3, style_dim))
            self.to_rgbs.append(ToRGB(channel, style_dim))
    def forward(self, z, noise):
        latent = self.style(z)
        out = self.input.repeat(z.shape[0], 1, 1, 1)
        out = self.conv1(out, latent, noise=noise[0])
        skip = self.to_rgb1(out, latent)
        i = 1
        for conv1, conv2, to_rgb in zip(self.convs[::2], self.convs[1::2], self.to_rgbs):
            out = conv1(out, latent, noise=noise[i])
            out = conv2(out, latent, noise=noise[i + 1])
            skip = to_rgb(out, latent, skip)
            i += 2
        return skip
class Discriminator(nn.Module):
    def __init__(self, size=16, channel=16):
        super().__init__()
        convs = [EqualConv2d(3, channel, 1), nn.LeakyReLU(0.2)]
        for _ in range(int(math.log(size, 2)) - 2):
            convs += [EqualConv2d(channel, channel, 3, padding=1), nn.LeakyReLU(0.2),
                      nn.AvgPool2d(2)]
        self.convs = nn.Sequential(*convs)
        self.stddev_group, self.stddev_feat = 4, 1
        self.final_conv = EqualConv2d(channel + 1, channel, 3, padding=1)
        self.final_linear = nn.Sequential(EqualLinear(channel * 4 * 4, channel, activation="fused_lrelu"),
                                          EqualLinear(channel, 1))
    def forward(self, input):
        out = self.convs(input)
        batch, channel, height, width = out.shape
        group = min(batch, self.stddev_group)
        stddev = out.view(group, -1, self.stddev_feat, channel // self.stddev_feat, height, width)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdims=True).squeeze(2)
        stddev = stddev.repeat(group, 1, height, width)
        out = torch.cat([out, stddev], 1)
        out = F.leaky_relu(self.final_conv(out), 0.2) * math.sqrt(2)
        out = out.view(batch, -1)
        return self.final_linear(out)
def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()
def d_r1_loss(real_pred, real_img):
    grad_real, = torch.autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    return grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()
def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()
def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag
generator, discriminator = Generator(), Discriminator(); sync(generator, discriminator)
g_optim = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0 ** 0.8, 0.99 ** 0.8))
d_optim = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0 ** 0.8, 0.99 ** 0.8))
G, D = comp(generator), comp(discriminator)
r = np.random.default_rng(0)
batch, r1, d_reg_every = 4, 10.0, 2
def t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float32))
def noises():
    return [t(r.standard_normal((batch, 1, s, s))) for s in (4, 8, 8, 16, 16)]
LOSSES = []
for idx in range(4):
    real_img = t(np.tanh(r.standard_normal((batch, 3, 16, 16))))
    requires_grad(generator, False)
    requires_grad(discriminator, True)
    fake_img = G(t(r.standard_normal((batch, 32))), noises())
    fake_pred = D(fake_img)
    real_pred = D(real_img)
    d_loss = d_logistic_loss(real_pred, fake_pred)
    discriminator.zero_grad()
    d_loss.backward()
    d_optim.step()
    LOSSES += [d_loss.item(), real_pred.mean().item(), fake_pred.mean().item()]
    if idx % d_reg_every == 0:
        real_img.requires_grad = True
        real_pred = D(real_img)
        r1_loss = d_r1_loss(real_pred, real_img)
        discriminator.zero_grad()
        (r1 / 2 * r1_loss * d_reg_every + 0 * real_pred[0]).backward()
        d_optim.step()
        LOSSES.append(r1_loss.item())
    requires_grad(generator, True)
    requires_grad(discriminator, False)
    fake_img = G(t(r.standard_normal((batch, 32))), noises())
    fake_pred = D(fake_img)
    g_loss = g_nonsaturating_loss(fake_pred)
    generator.zero_grad()
    g_loss.backward()
    g_optim.step()
    LOSSES.append(g_loss.item())
LOSSES += [generator.conv1.noise.weight.item(), generator.style[1].weight.grad.abs().sum().item()]
with torch.no_grad():
    sample = G(t(r.standard_normal((batch, 32))), noises())
LOSSES += sample.flatten()[::97].tolist()
