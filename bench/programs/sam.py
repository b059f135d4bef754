"""Sharpness-Aware Minimization as the davda54/sam repository trains a WideResNet.

A WideResNet-16 at width factor 2 on 32x32 images, batch 32, 10 classes: pre-activation
blocks, BatchNorm whose momentum is zeroed for the second pass by ``model.apply``; the
smoothed cross entropy (one-hot by ``scatter_``, ``kl_div``); the SAM optimizer wrapping
SGD with momentum and weight decay (the climb to w + e(w) by the stacked gradient norm,
``p.add_``, undone by ``p.data = old_p``). Each step runs two forward and backward
passes. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "sam"
BATCH, CLASSES = 32, 10


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    def _grad_norm(self):
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2)
            for group in self.param_groups for p in group["params"] if p.grad is not None]), p=2)


def set_bn_momentum(model, on):
    def _set(module):
        if isinstance(module, nn.BatchNorm2d):
            if on and hasattr(module, "backup_momentum"):
                module.momentum = module.backup_momentum
            elif not on:
                module.backup_momentum = module.momentum
                module.momentum = 0
    model.apply(_set)


def smooth_crossentropy(pred, gold, smoothing=0.1):
    one_hot = torch.full_like(pred, fill_value=smoothing / (pred.size(1) - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    return F.kl_div(input=F.log_softmax(pred, dim=1), target=one_hot, reduction="none").sum(-1)


class BasicUnit(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.block = nn.Sequential(
            nn.BatchNorm2d(channels), nn.ReLU(inplace=True), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(inplace=True), nn.Conv2d(channels, channels, 3, padding=1, bias=False))

    def forward(self, x):
        return x + self.block(x)


class DownsampleUnit(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.norm_act = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(inplace=True))
        self.block = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(c_out), nn.ReLU(inplace=True), nn.Conv2d(c_out, c_out, 3, padding=1, bias=False))
        self.downsample = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)

    def forward(self, x):
        x = self.norm_act(x)
        return self.block(x) + self.downsample(x)


class WideResNet(nn.Module):
    def __init__(self, depth=16, width_factor=2, labels=CLASSES):
        super().__init__()
        n = (depth - 4) // 6
        filters = [16, 16 * width_factor, 32 * width_factor, 64 * width_factor]
        layers = [nn.Conv2d(3, filters[0], 3, padding=1, bias=False)]
        for i, stride in enumerate((1, 2, 2)):
            layers.append(DownsampleUnit(filters[i], filters[i + 1], stride))
            layers += [BasicUnit(filters[i + 1]) for _ in range(n - 1)]
        layers += [nn.BatchNorm2d(filters[3]), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                   nn.Linear(filters[3], labels)]
        self.f = nn.Sequential(*layers)

    def forward(self, x):
        return self.f(x)


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.net = WideResNet()
        load_params(NAME, self.net)
        self.model = compile(self.net)
        self.optimizer = SAM(self.net.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9,
                             weight_decay=5e-4)

    def step(self) -> float:
        inputs = torch.from_numpy(self.r.standard_normal((BATCH, 3, 32, 32)).astype(np.float32))
        targets = torch.from_numpy(self.r.integers(0, CLASSES, BATCH))
        set_bn_momentum(self.net, True)
        loss = smooth_crossentropy(self.model(inputs), targets).mean()
        loss.backward()
        self.optimizer.first_step(zero_grad=True)
        set_bn_momentum(self.net, False)
        smooth_crossentropy(self.model(inputs), targets).mean().backward()
        self.optimizer.second_step(zero_grad=True)
        return loss.item()
