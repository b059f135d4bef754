"""torchvision's DenseNet-BC (models/densenet.py) at CIFAR size, memory-efficient.

Three dense blocks of 6 layers (growth 12, bottleneck width 48): each layer concatenates
every earlier feature map (``torch.cat`` of a list), BN-ReLU-1x1 conv under
``torch.utils.checkpoint`` (torchvision's ``memory_efficient``: the bottleneck is
recomputed in the backward), then BN-ReLU-3x3 conv; transitions halve the channels and
average-pool. An ``OrderedDict``-built ``nn.Sequential`` stem, ``nn.ModuleDict`` blocks.
Batch 32 of 32x32; cross-entropy, SGD with Nesterov momentum and weight decay under
MultiStepLR. Compiled: the model.
"""
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as cp

from .common import load_params, rng

NAME = "densenet"
BATCH, CLASSES = 32, 10


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size, memory_efficient=False):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.memory_efficient = memory_efficient

    def bn_function(self, inputs):
        concated_features = torch.cat(inputs, 1)
        return self.conv1(self.relu1(self.norm1(concated_features)))

    def any_requires_grad(self, input):
        for tensor in input:
            if tensor.requires_grad:
                return True
        return False

    def call_checkpoint_bottleneck(self, input):
        def closure(*inputs):
            return self.bn_function(inputs)
        return cp.checkpoint(closure, *input, use_reentrant=False)

    def forward(self, input):
        prev_features = [input] if isinstance(input, torch.Tensor) else input
        if self.memory_efficient and self.any_requires_grad(prev_features):
            bottleneck_output = self.call_checkpoint_bottleneck(prev_features)
        else:
            bottleneck_output = self.bn_function(prev_features)
        return self.conv2(self.relu2(self.norm2(bottleneck_output)))


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate, memory_efficient=False):
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, memory_efficient)
            self.add_module("denselayer%d" % (i + 1), layer)

    def forward(self, init_features):
        features = [init_features]
        for name, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features, num_output_features):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate=12, block_config=(6, 6, 6), num_init_features=24, bn_size=4,
                 num_classes=CLASSES, memory_efficient=True):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=3, stride=1, padding=1, bias=False))]))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate, memory_efficient)
            self.features.add_module("denseblock%d" % (i + 1), block)
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module("transition%d" % (i + 1), _Transition(num_features, num_features // 2))
                num_features = num_features // 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.standard_normal((BATCH, 3, 32, 32)).astype("float32")),
                         torch.from_numpy(r.integers(0, CLASSES, BATCH))) for _ in range(4)]
        self.model = DenseNet()
        load_params(NAME, self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                                         weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, milestones=[150, 225], gamma=0.1)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        loss = F.cross_entropy(self.forward(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
