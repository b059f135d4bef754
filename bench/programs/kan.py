"""A Kolmogorov-Arnold network as efficient-kan writes it, trained on a classification task.

Each KANLinear keeps a knot-grid buffer per input and evaluates B-spline bases by the
Cox-de Boor recursion (comparisons cast to float, a Python loop over the spline order of
3, slices of the grid), then sums bases times coefficients by ``einsum`` beside a SiLU
base branch through ``F.linear``. Layers 64-128-64-10, grid 8, batch 256; cross-entropy
plus efficient-kan's L1 + entropy regularization of the spline weights, Adam. Compiled:
the network.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "kan"
LAYERS, GRID, ORDER, BATCH = (64, 128, 64, 10), 8, 3, 256


class KANLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        h = 2.0 / GRID
        grid = (torch.arange(-ORDER, GRID + ORDER + 1) * h - 1.0).expand(in_features, -1).contiguous()
        self.register_buffer("grid", grid)
        self.base_weight = nn.Parameter(torch.empty(out_features, in_features))
        self.spline_weight = nn.Parameter(torch.empty(out_features, in_features, GRID + ORDER))
        self.spline_scaler = nn.Parameter(torch.empty(out_features, in_features))

    def b_splines(self, x):
        grid = self.grid
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, ORDER + 1):
            bases = ((x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)]) * bases[:, :, :-1]) + \
                    ((grid[:, k + 1:] - x) / (grid[:, k + 1:] - grid[:, 1:(-k)]) * bases[:, :, 1:])
        return bases.contiguous()

    def forward(self, x):
        base_output = F.linear(F.silu(x), self.base_weight)
        spline_weight = self.spline_weight * self.spline_scaler.unsqueeze(-1)
        return base_output + torch.einsum("bik,oik->bo", self.b_splines(x), spline_weight)

    def regularization_loss(self):
        l1_fake = self.spline_weight.abs().mean(-1)
        activation = l1_fake.sum()
        p = l1_fake / activation
        return activation - torch.sum(p * p.log())


class KAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([KANLinear(i, o) for i, o in zip(LAYERS, LAYERS[1:])])

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) if layer is not self.layers[-1] else layer(x)
        return x


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.x = torch.from_numpy(r.uniform(-1, 1, (BATCH, LAYERS[0])).astype("float32"))
        self.y = torch.from_numpy(r.integers(0, LAYERS[-1], BATCH))
        self.model = KAN()
        load_params(NAME, self.model)
        self.forward = compile(self.model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def step(self) -> float:
        loss = F.cross_entropy(self.forward(self.x), self.y)
        loss = loss + 1e-4 * sum(layer.regularization_loss() for layer in self.model.layers)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()
