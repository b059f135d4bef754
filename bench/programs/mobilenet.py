"""MobileNetV2 with squeeze-and-excitation (V3's blocks), as torchvision writes it.

``ConvBNActivation`` (an ``nn.Sequential`` of Conv2d, BatchNorm2d and ReLU6 or Hardswish,
in place), inverted residuals (1x1 expansion, a 3x3 depthwise convolution with
``groups`` = channels, a 1x1 projection, the skip where shapes allow), squeeze-and-
excitation on the later blocks (``adaptive_avg_pool2d``, two 1x1 convolutions,
``hardsigmoid``), ``adaptive_avg_pool2d`` and ``flatten`` to a Linear head;
CrossEntropyLoss with label smoothing 0.1, SGD with Nesterov momentum and weight decay.
Width 0.5, CIFAR-sized 32x32 images, batch 16. Compiled: the model.
"""
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import load_params, rng

NAME = "mobilenet"
BATCH, SIZE, CLASSES, WIDTH = 16, 32, 10, 0.5


def _make_divisible(v, divisor, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNActivation(nn.Sequential):
    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1, activation_layer=None):
        padding = (kernel_size - 1) // 2
        if activation_layer is None:
            activation_layer = nn.ReLU6
        super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(out_planes), activation_layer(inplace=True))


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_factor=4):
        super().__init__()
        squeeze_channels = _make_divisible(input_channels // squeeze_factor, 8)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)

    def forward(self, input):
        scale = F.adaptive_avg_pool2d(input, 1)
        scale = self.fc2(self.relu(self.fc1(scale)))
        return F.hardsigmoid(scale, inplace=True) * input


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio, use_se, activation):
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(ConvBNActivation(inp, hidden_dim, kernel_size=1, activation_layer=activation))
        layers.append(ConvBNActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim,
                                       activation_layer=activation))
        if use_se:
            layers.append(SqueezeExcitation(hidden_dim))
        layers.extend([nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)])
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=CLASSES, width_mult=WIDTH, round_nearest=8):
        super().__init__()
        # t, c, n, s, squeeze-and-excitation, activation (CIFAR strides: the stem keeps 32x32)
        setting = [[1, 16, 1, 1, False, nn.ReLU6], [6, 24, 2, 2, False, nn.ReLU6],
                   [6, 32, 3, 2, True, nn.Hardswish], [6, 64, 3, 2, True, nn.Hardswish],
                   [6, 96, 2, 1, True, nn.Hardswish], [6, 160, 2, 2, True, nn.Hardswish]]
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(640 * max(1.0, width_mult), round_nearest)
        features = [ConvBNActivation(3, input_channel, stride=1)]
        for t, c, n, s, se, act in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t, se, act))
                input_channel = output_channel
        features.append(ConvBNActivation(input_channel, self.last_channel, kernel_size=1,
                                         activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=0.0), nn.Linear(self.last_channel, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32)),
                         torch.from_numpy(r.integers(0, CLASSES, BATCH))) for _ in range(4)]
        self.model = MobileNetV2()
        load_params(NAME, self.model)
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9,
                                         nesterov=True, weight_decay=4e-5)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        image, target = self.batches[self.i % len(self.batches)]
        self.i += 1
        output = self.forward(image)
        loss = self.criterion(output, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
