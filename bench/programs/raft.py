"""RAFT's training step (princeton-vl/RAFT, core/raft.py, corr.py, update.py) at small size.

A feature encoder of instance-normed residual blocks runs both frames as one batch (a
list input cat and split back), a context encoder gives the ConvGRU's initial state; the
all-pairs correlation is one matmul per batch, pooled into a 4-level pyramid by
``avg_pool2d``; each of 6 iterations looks the pyramid up around the current
coordinates by ``F.grid_sample`` on a ``meshgrid`` window (radius 3), encodes motion,
updates a ConvGRU and upsamples the flow convexly (``F.unfold`` + softmax over 9
neighbours). Sequence loss with weights 0.8^(N-i) over valid pixels, AdamW, OneCycleLR,
gradient clipping. Batch 2 of 128x128 frame pairs. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "raft"
BATCH, H, W, ITERS = 2, 128, 128, 6


def bilinear_sampler(img, coords):
    """grid_sample in pixel coordinates."""
    h, w = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    grid = torch.cat([2 * xgrid / (w - 1) - 1, 2 * ygrid / (h - 1) - 1], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


def coords_grid(batch, ht, wd, device):
    coords = torch.meshgrid(torch.arange(ht, device=device), torch.arange(wd, device=device), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=4, radius=3):
        self.num_levels, self.radius = num_levels, radius
        batch, dim, ht, wd = fmap1.shape
        corr = torch.matmul(fmap1.view(batch, dim, ht * wd).transpose(1, 2), fmap2.view(batch, dim, ht * wd))
        corr = (corr / torch.sqrt(torch.tensor(dim).float())).reshape(batch * ht * wd, 1, ht, wd)
        self.corr_pyramid = [corr]
        for _ in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape
        out_pyramid = []
        for i in range(self.num_levels):
            dx = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            dy = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), axis=-1)
            coords_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2**i + delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            corr = bilinear_sampler(self.corr_pyramid[i], coords_lvl)
            out_pyramid.append(corr.view(batch, h1, w1, -1))
        return torch.cat(out_pyramid, dim=-1).permute(0, 3, 1, 2).contiguous().float()


class ResidualBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.norm1, self.norm2 = nn.InstanceNorm2d(planes), nn.InstanceNorm2d(planes)
        self.downsample = None if stride == 1 else nn.Sequential(
            nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride), nn.InstanceNorm2d(planes))

    def forward(self, x):
        y = self.relu(self.norm1(self.conv1(x)))
        y = self.relu(self.norm2(self.conv2(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


class Encoder(nn.Module):
    def __init__(self, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=7, stride=2, padding=3)
        self.norm1 = nn.InstanceNorm2d(32)
        self.relu1 = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(ResidualBlock(32, 32), ResidualBlock(32, 32))
        self.layer2 = nn.Sequential(ResidualBlock(32, 48, stride=2), ResidualBlock(48, 48))
        self.layer3 = nn.Sequential(ResidualBlock(48, 64, stride=2), ResidualBlock(64, 64))
        self.conv2 = nn.Conv2d(64, output_dim, kernel_size=1)

    def forward(self, x):
        is_list = isinstance(x, (tuple, list))
        if is_list:
            batch_dim = x[0].shape[0]
            x = torch.cat(x, dim=0)
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.conv2(self.layer3(self.layer2(self.layer1(x))))
        if is_list:
            x = torch.split(x, [batch_dim, batch_dim], dim=0)
        return x


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim, input_dim):
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class UpdateBlock(nn.Module):
    def __init__(self, cor_planes, hidden_dim, context_dim):
        super().__init__()
        self.convc1 = nn.Conv2d(cor_planes, 64, 1)
        self.convf1 = nn.Conv2d(2, 32, 7, padding=3)
        self.convf2 = nn.Conv2d(32, 16, 3, padding=1)
        self.conv = nn.Conv2d(80, 62, 3, padding=1)
        self.gru = ConvGRU(hidden_dim, context_dim + 64)
        self.flow_head = nn.Sequential(nn.Conv2d(hidden_dim, 64, 3, padding=1), nn.ReLU(inplace=True),
                                       nn.Conv2d(64, 2, 3, padding=1))
        self.mask = nn.Sequential(nn.Conv2d(hidden_dim, 64, 3, padding=1), nn.ReLU(inplace=True),
                                  nn.Conv2d(64, 64 * 9, 1))

    def forward(self, net, inp, corr, flow):
        cor = F.relu(self.convc1(corr))
        flo = F.relu(self.convf2(F.relu(self.convf1(flow))))
        motion = torch.cat([F.relu(self.conv(torch.cat([cor, flo], dim=1))), flow], dim=1)
        net = self.gru(net, torch.cat([inp, motion], dim=1))
        return net, .25 * self.mask(net), self.flow_head(net)


class RAFT(nn.Module):
    def __init__(self, hdim=64, cdim=32, corr_levels=4, corr_radius=3):
        super().__init__()
        self.hidden_dim, self.context_dim = hdim, cdim
        self.corr_levels, self.corr_radius = corr_levels, corr_radius
        self.fnet = Encoder(64)
        self.cnet = Encoder(hdim + cdim)
        self.update_block = UpdateBlock(corr_levels * (2 * corr_radius + 1) ** 2, hdim, cdim)

    def upsample_flow(self, flow, mask):
        n, _, h, w = flow.shape
        mask = torch.softmax(mask.view(n, 1, 9, 8, 8, h, w), dim=2)
        up_flow = F.unfold(8 * flow, [3, 3], padding=1).view(n, 2, 9, 1, 1, h, w)
        up_flow = torch.sum(mask * up_flow, dim=2).permute(0, 1, 4, 2, 5, 3)
        return up_flow.reshape(n, 2, 8 * h, 8 * w)

    def forward(self, image1, image2, iters=ITERS):
        image1 = (2 * (image1 / 255.0) - 1.0).contiguous()
        image2 = (2 * (image2 / 255.0) - 1.0).contiguous()
        fmap1, fmap2 = self.fnet([image1, image2])
        corr_fn = CorrBlock(fmap1.float(), fmap2.float(), self.corr_levels, self.corr_radius)
        net, inp = torch.split(self.cnet(image1), [self.hidden_dim, self.context_dim], dim=1)
        net, inp = torch.tanh(net), torch.relu(inp)
        n, _, h, w = image1.shape
        coords0 = coords_grid(n, h // 8, w // 8, image1.device)
        coords1 = coords_grid(n, h // 8, w // 8, image1.device)
        flow_predictions = []
        for _ in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            net, up_mask, delta_flow = self.update_block(net, inp, corr, coords1 - coords0)
            coords1 = coords1 + delta_flow
            flow_predictions.append(self.upsample_flow(coords1 - coords0, up_mask))
        return flow_predictions


def sequence_loss(flow_preds, flow_gt, valid, gamma=0.8, max_flow=400):
    n_predictions = len(flow_preds)
    flow_loss = 0.0
    mag = torch.sum(flow_gt**2, dim=1).sqrt()
    valid = (valid >= 0.5) & (mag < max_flow)
    for i in range(n_predictions):
        i_weight = gamma**(n_predictions - i - 1)
        flow_loss += i_weight * (valid[:, None] * (flow_preds[i] - flow_gt).abs()).mean()
    return flow_loss


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            image1 = torch.from_numpy((r.random((BATCH, 3, H, W)) * 255).astype("float32"))
            flow = torch.from_numpy(r.standard_normal((BATCH, 2, H, W)).astype("float32") * 3)
            valid = torch.from_numpy((r.random((BATCH, H, W)) > 0.05).astype("float32"))
            self.batches.append((image1, image1.roll(2, dims=-1), flow, valid))
        self.model = RAFT()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=4e-4, weight_decay=1e-5, eps=1e-8)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, 4e-4, 100000, pct_start=0.05, cycle_momentum=False, anneal_strategy="linear")
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        image1, image2, flow, valid = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        loss = sequence_loss(self.forward(image1, image2), flow, valid)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
