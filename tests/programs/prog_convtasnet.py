from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import itertools
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
# Conv-TasNet (Luo & Mesgarani; kaituoxu/asteroid style): a 1-D conv encoder, a temporal conv
# network of depthwise-separable dilated Conv1d blocks with PReLU and global layer norm (mean
# and var over (1, 2) by hand), sigmoid masks, a ConvTranspose1d decoder, and negative SI-SNR
# under permutation-invariant training (itertools.permutations, stacked losses, min, gather)
torch.manual_seed(0)
EPS = 1e-8


class GlobalLayerNorm(nn.Module):
    def __init__(self, channel_size):
        super(GlobalLayerNorm, self).__init__()
        self.gamma = nn.Parameter(torch.Tensor(1, channel_size, 1))
        self.beta = nn.Parameter(torch.Tensor(1, channel_size, 1))
        self.reset_parameters()

    def reset_parameters(self):
        self.gamma.data.fill_(1)
        self.beta.data.zero_()

    def forward(self, y):
        mean = y.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)  # [M, 1, 1]
        var = (torch.pow(y - mean, 2)).mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)
        gLN_y = self.gamma * (y - mean) / torch.pow(var + EPS, 0.5) + self.beta
        return gLN_y


class ChannelwiseLayerNorm(nn.Module):
    def __init__(self, channel_size):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, channel_size, 1))
        self.beta = nn.Parameter(torch.zeros(1, channel_size, 1))

    def forward(self, y):
        mean = torch.mean(y, dim=1, keepdim=True)  # [M, 1, K]
        var = torch.var(y, dim=1, keepdim=True, unbiased=False)
        return self.gamma * (y - mean) / torch.pow(var + EPS, 0.5) + self.beta


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super(Chomp1d, self).__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


def chose_norm(norm_type, channel_size):
    return GlobalLayerNorm(channel_size) if norm_type == "gLN" else ChannelwiseLayerNorm(channel_size)


class DepthwiseSeparableConv(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, norm_type="gLN", causal=False):
        super(DepthwiseSeparableConv, self).__init__()
        depthwise_conv = nn.Conv1d(in_channels, in_channels, kernel_size, stride=stride, padding=padding,
                                   dilation=dilation, groups=in_channels, bias=False)
        prelu = nn.PReLU()
        norm = chose_norm(norm_type, in_channels)
        pointwise_conv = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        if causal:
            self.net = nn.Sequential(depthwise_conv, Chomp1d(padding), prelu, norm, pointwise_conv)
        else:
            self.net = nn.Sequential(depthwise_conv, prelu, norm, pointwise_conv)

    def forward(self, x):
        return self.net(x)


class TemporalBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, norm_type="gLN", causal=False):
        super(TemporalBlock, self).__init__()
        conv1x1 = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        prelu = nn.PReLU()
        norm = chose_norm(norm_type, out_channels)
        dsconv = DepthwiseSeparableConv(out_channels, in_channels, kernel_size, stride, padding, dilation,
                                        norm_type, causal)
        self.net = nn.Sequential(conv1x1, prelu, norm, dsconv)

    def forward(self, x):
        residual = x
        out = self.net(x)
        return out + residual  # look like w/o F.relu is better than w/ F.relu


class TemporalConvNet(nn.Module):
    def __init__(self, N, B, H, P, X, R, C, norm_type="gLN", causal=False, mask_nonlinear="sigmoid"):
        super(TemporalConvNet, self).__init__()
        self.C = C
        self.mask_nonlinear = mask_nonlinear
        layer_norm = ChannelwiseLayerNorm(N)
        bottleneck_conv1x1 = nn.Conv1d(N, B, 1, bias=False)
        repeats = []
        for r in range(R):
            blocks = []
            for x in range(X):
                dilation = 2 ** x
                padding = (P - 1) * dilation if causal else (P - 1) * dilation // 2
                blocks += [TemporalBlock(B, H, P, stride=1, padding=padding, dilation=dilation,
                                         norm_type=norm_type, causal=causal)]
            repeats += [nn.Sequential(*blocks)]
        temporal_conv_net = nn.Sequential(*repeats)
        mask_conv1x1 = nn.Conv1d(B, C * N, 1, bias=False)
        self.network = nn.Sequential(layer_norm, bottleneck_conv1x1, temporal_conv_net, mask_conv1x1)

    def forward(self, mixture_w):
        M, N, K = mixture_w.size()
        score = self.network(mixture_w)  # [M, N, K] -> [M, C*N, K]
        score = score.view(M, self.C, N, K)  # [M, C*N, K] -> [M, C, N, K]
        if self.mask_nonlinear == "softmax":
            est_mask = F.softmax(score, dim=1)
        else:
            est_mask = torch.sigmoid(score)
        return est_mask


class ConvTasNet(nn.Module):
    def __init__(self, N, L, B, H, P, X, R, C, norm_type="gLN", causal=False):
        super(ConvTasNet, self).__init__()
        self.N, self.L, self.C = N, L, C
        self.encoder = nn.Conv1d(1, N, kernel_size=L, stride=L // 2, bias=False)
        self.separator = TemporalConvNet(N, B, H, P, X, R, C, norm_type, causal)
        self.decoder = nn.ConvTranspose1d(N, 1, kernel_size=L, stride=L // 2, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)

    def forward(self, mixture):
        mixture_w = F.relu(self.encoder(mixture.unsqueeze(1)))  # [M, N, K]
        est_mask = self.separator(mixture_w)
        masked = mixture_w.unsqueeze(1) * est_mask  # [M, C, N, K]
        M, C, N, K = masked.shape
        est_source = self.decoder(masked.view(M * C, N, K)).view(M, C, -1)
        T_origin, T_conv = mixture.size(-1), est_source.size(-1)
        est_source = F.pad(est_source, (0, T_origin - T_conv))
        return est_source


def si_snr(est, ref, eps=1e-8):
    """Scale-invariant SNR of est vs ref, both [..., T], zero-mean first."""
    est = est - torch.mean(est, dim=-1, keepdim=True)
    ref = ref - torch.mean(ref, dim=-1, keepdim=True)
    dot = torch.sum(est * ref, dim=-1, keepdim=True)
    s_target = dot * ref / (torch.sum(ref ** 2, dim=-1, keepdim=True) + eps)
    e_noise = est - s_target
    return 10 * torch.log10(torch.sum(s_target ** 2, dim=-1) / (torch.sum(e_noise ** 2, dim=-1) + eps) + eps)


def pit_si_snr_loss(est_sources, sources):
    """Negative SI-SNR under the best permutation of the estimated sources, per mixture."""
    n_src = sources.shape[1]
    perms = list(itertools.permutations(range(n_src)))
    losses = []
    for perm in perms:
        permuted = est_sources[:, list(perm)]
        losses.append(-si_snr(permuted, sources).mean(dim=-1))
    loss_set = torch.stack(losses, dim=1)  # [M, n_perms]
    min_loss, min_idx = torch.min(loss_set, dim=1)
    perm_t = torch.tensor(perms, device=est_sources.device)  # [n_perms, C]
    best_perm = perm_t[min_idx]  # [M, C]
    reordered = torch.gather(est_sources, 1, best_perm.unsqueeze(-1).expand_as(est_sources))
    return min_loss.mean(), reordered, min_idx


r = np.random.default_rng(0)
M, T, C = 4, 400, 2
t = np.arange(T) / 8000.0


def batch():
    f = r.uniform(200, 1200, (M, C, 1))
    src = np.sin(2 * np.pi * f * t) * r.uniform(0.3, 1.0, (M, C, 1))
    src[:, 1] = np.sign(src[:, 1]) * np.abs(src[:, 1]) ** 0.5 + 0.05 * r.standard_normal((M, T))
    src = torch.from_numpy(src.astype(np.float32))
    return src.sum(1), src


model = ConvTasNet(N=32, L=16, B=24, H=48, P=3, X=3, R=2, C=C)
sync(model)
net = comp(model)
loss_fn = comp(pit_si_snr_loss)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
LOSSES = []
for step in range(4):
    mixture, sources = batch()
    est = net(mixture)
    loss, reordered, idx = loss_fn(est, sources)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5)
    optimizer.step()
    LOSSES += [loss.item(), reordered.abs().mean().item()]
model.eval()
with torch.no_grad():
    mixture, sources = batch()
    est = net(mixture)
    loss, reordered, idx = pit_si_snr_loss(est, sources)
    LOSSES += [loss.item(), si_snr(reordered, sources).mean().item()]
    # the causal, channel-wise-normed variant on a longer mixture
    causal = ConvTasNet(N=16, L=8, B=16, H=24, P=3, X=2, R=1, C=3, norm_type="cLN", causal=True)
    sync(causal)
    out = causal(torch.cat([mixture, mixture], -1))
    LOSSES += [out.shape[-1], out.pow(2).mean().item()]
