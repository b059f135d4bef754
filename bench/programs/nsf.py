"""Neural spline flows as nflows writes its rational-quadratic coupling transforms.

Batch 256 of an 8-d two-moons-and-rings mixture: 4 coupling layers, each a residual MLP
(width 64) on half the features giving 8 bins' widths, heights and derivatives for the
other half; inputs outside [-3, 3] copied through by boolean masks and the inside ones
written back by masked assignment; bins by softmax, ``cumsum``, ``F.pad`` and ends pinned
in place; each input's bin by ``torch.searchsorted`` and ``gather``; fixed permutations
between layers; a standard normal base; negative log-likelihood, ``clip_grad_norm_``,
Adam. Compiled: the flow's log-probability.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "nsf"
BATCH, FEATURES, LAYERS, HIDDEN, BINS, TAIL = 256, 8, 4, 64, 8, 3.0
MIN_W = MIN_H = MIN_D = 1e-3


def spline(inputs, uw, uh, ud):
    """The forward rational-quadratic spline on [-TAIL, TAIL]: (outputs, log|det|)."""
    widths = MIN_W + (1 - MIN_W * BINS) * F.softmax(uw, dim=-1)
    cumwidths = F.pad(torch.cumsum(widths, dim=-1), pad=(1, 0), mode="constant", value=0.0) * 2 * TAIL - TAIL
    cumwidths[..., 0] = -TAIL
    cumwidths[..., -1] = TAIL
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]
    derivatives = MIN_D + F.softplus(ud)
    heights = MIN_H + (1 - MIN_H * BINS) * F.softmax(uh, dim=-1)
    cumheights = F.pad(torch.cumsum(heights, dim=-1), pad=(1, 0), mode="constant", value=0.0) * 2 * TAIL - TAIL
    cumheights[..., 0] = -TAIL
    cumheights[..., -1] = TAIL
    heights = cumheights[..., 1:] - cumheights[..., :-1]
    idx = (torch.searchsorted(cumwidths, inputs[..., None], right=True) - 1).clamp(0, BINS - 1)
    x_k, w_k, y_k = cumwidths.gather(-1, idx)[..., 0], widths.gather(-1, idx)[..., 0], cumheights.gather(-1, idx)[..., 0]
    delta = (heights / widths).gather(-1, idx)[..., 0]
    d_k, d_k1, h_k = derivatives.gather(-1, idx)[..., 0], derivatives[..., 1:].gather(-1, idx)[..., 0], heights.gather(-1, idx)[..., 0]
    theta = (inputs - x_k) / w_k
    tt = theta * (1 - theta)
    denominator = delta + (d_k + d_k1 - 2 * delta) * tt
    outputs = y_k + h_k * (delta * theta.pow(2) + d_k * tt) / denominator
    numerator = delta.pow(2) * (d_k1 * theta.pow(2) + 2 * delta * tt + d_k * (1 - theta).pow(2))
    return outputs, torch.log(numerator) - 2 * torch.log(denominator)


class Coupling(nn.Module):
    def __init__(self, parity):
        super().__init__()
        mask = torch.tensor([(j + parity) % 2 for j in range(FEATURES)])
        self.register_buffer("identity_features", mask.le(0).nonzero().view(-1))
        self.register_buffer("transform_features", mask.gt(0).nonzero().view(-1))
        self.inp = nn.Linear(FEATURES // 2, HIDDEN)
        self.blocks = nn.ModuleList([nn.Sequential(nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN))
                                     for _ in range(2)])
        self.out = nn.Linear(HIDDEN, FEATURES // 2 * (3 * BINS - 1))

    def forward(self, inputs):
        identity, x = inputs[:, self.identity_features], inputs[:, self.transform_features]
        h = self.inp(identity)
        for block in self.blocks:
            h = h + block(h)
        params = self.out(h).view(x.shape[0], x.shape[1], 3 * BINS - 1)
        uw, uh = params[..., :BINS] / np.sqrt(HIDDEN), params[..., BINS:2 * BINS] / np.sqrt(HIDDEN)
        ud = F.pad(params[..., 2 * BINS:], pad=(1, 1))
        ud[..., 0] = ud[..., -1] = np.log(np.exp(1 - MIN_D) - 1)
        inside = (x >= -TAIL) & (x <= TAIL)
        y, logabsdet = torch.zeros_like(x), torch.zeros_like(x)
        y[~inside] = x[~inside]
        y[inside], logabsdet[inside] = spline(x[inside], uw[inside, :], uh[inside, :], ud[inside, :])
        outputs = torch.empty_like(inputs)
        outputs[:, self.identity_features] = identity
        outputs[:, self.transform_features] = y
        return outputs, logabsdet.sum(-1)


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Coupling(i % 2) for i in range(LAYERS)])
        self.register_buffer("perm", torch.roll(torch.arange(FEATURES), 1))

    def forward(self, x):
        total = x.new_zeros(x.shape[0])
        for layer in self.layers:
            x, logabsdet = layer(x)
            x = x[:, self.perm]
            total = total + logabsdet
        return -0.5 * (x ** 2).sum(-1) - 0.5 * FEATURES * np.log(2 * np.pi) + total


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.flow = Flow()
        load_params(NAME, self.flow)
        self.log_prob = compile(self.flow)
        self.optimizer = torch.optim.Adam(self.flow.parameters(), lr=1e-3)

    def data(self):
        r, n = self.r, BATCH
        t, side = r.uniform(0, np.pi, (n, 2)), r.integers(0, 2, (n, 2))
        x0, x1 = np.where(side, np.cos(t), 1 - np.cos(t)), np.where(side, np.sin(t), 0.5 - np.sin(t))
        ang, rad = r.uniform(0, 2 * np.pi, (n, 2)), 1.5 + 0.5 * x0
        x = np.concatenate([x0, x1, rad * np.cos(ang), rad * np.sin(ang)], 1) + 0.05 * r.standard_normal((n, 8))
        return torch.from_numpy((x * 1.5).astype(np.float32))

    def step(self) -> float:
        loss = -self.log_prob(self.data()).mean()
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.flow.parameters(), 5.0)
        self.optimizer.step()
        return loss.item()
