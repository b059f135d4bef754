"""ConvNeXt (Liu et al. 2022) as facebookresearch/ConvNeXt writes it, at CIFAR size.

A 2x2 patchify stem, four stages (widths 32-256, depths 1, 1, 3, 1) of blocks: a depthwise
7x7 ``Conv2d``, ``LayerNorm`` over channels by permuting to (N, H, W, C), an inverted
bottleneck of two ``nn.Linear`` with GELU, layer scale (``gamma``) and DropPath (rate 0:
the frameworks draw different masks); the stem's and downsampling layers' channels-first
LayerNorm written out by mean/pow/sqrt; global average pooling, LayerNorm, a Linear head.
Inputs in ``channels_last``, batch 32 of 32x32; cross-entropy with label smoothing,
AdamW (no decay on norms, biases and gammas) with the learning rate set per step by a
warmup-cosine schedule, ``clip_grad_norm_``. Compiled: the model.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "convnext"
BATCH, DIMS, DEPTHS, CLASSES = 32, (32, 64, 128, 256), (1, 1, 3, 1), 10


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        self.normalized_shape = (normalized_shape, )

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0. or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        random_tensor.floor_()
        return x.div(keep_prob) * random_tensor


class Block(nn.Module):
    def __init__(self, dim, drop_path=0., layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim)), requires_grad=True)
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return input + self.drop_path(x)


class ConvNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=CLASSES, depths=DEPTHS, dims=DIMS, drop_path_rate=0.):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        self.downsample_layers.append(nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=2, stride=2),
                                                    LayerNorm(dims[0], eps=1e-6, data_format="channels_first")))
        for i in range(3):
            self.downsample_layers.append(nn.Sequential(LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                                                        nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2)))
        self.stages = nn.ModuleList()
        dp_rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(4):
            self.stages.append(nn.Sequential(*[Block(dims[i], dp_rates[cur + j]) for j in range(depths[i])]))
            cur += depths[i]
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        for i in range(4):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return self.head(self.norm(x.mean([-2, -1])))


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = ConvNeXt()
        load_params(NAME, self.model)
        with torch.no_grad():
            for m in self.model.modules():
                if isinstance(m, Block):
                    m.gamma.fill_(0.1)
        self.model = self.model.to(memory_format=torch.channels_last)
        decay = [p for n, p in self.model.named_parameters() if p.ndim > 1]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim <= 1]
        self.optimizer = torch.optim.AdamW([{"params": no_decay, "weight_decay": 0.0},
                                            {"params": decay, "weight_decay": 0.05}], lr=4e-3)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.forward = compile(self.model)
        self.it = 0

    def step(self) -> float:
        lr = 4e-3 * min(1.0, (self.it + 1) / 10) * 0.5 * (1 + math.cos(math.pi * (self.it % 100) / 100))
        self.it += 1
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x = torch.from_numpy(self.r.standard_normal((BATCH, 3, 32, 32)).astype("float32"))
        x = x.contiguous(memory_format=torch.channels_last)
        y = torch.from_numpy(self.r.integers(0, CLASSES, BATCH))
        self.model.train()
        loss = self.criterion(self.forward(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=5.0)
        self.optimizer.step()
        return loss.item()
