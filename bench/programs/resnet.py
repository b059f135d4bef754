"""A ResNet-18-shaped network for 32x32 images, as CIFAR training repositories write it.

BasicBlocks of two 3x3 convolutions with BatchNorm and ReLU, a 1x1 convolution with
BatchNorm on the shortcut where the shape changes, stages of [2, 2, 2, 2] blocks at a
quarter of ResNet-18's width (16, 32, 64, 128 channels), global average pooling, a
Linear head; cross-entropy, SGD with momentum and weight decay, batch 32. Compiled: the
model.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "resnet"
BATCH, CLASSES = 32, 10


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        return F.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, width=16, num_classes=CLASSES):
        super().__init__()
        self.in_planes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, width * 2, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, width * 4, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, width * 8, num_blocks[3], stride=2)
        self.linear = nn.Linear(width * 8 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        layers = []
        for s in [stride] + [1] * (num_blocks - 1):
            layers.append(block(self.in_planes, planes, s))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(out.size(0), -1)
        return self.linear(out)


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.inputs = torch.from_numpy(r.standard_normal((BATCH, 3, 32, 32), dtype="float32"))
        self.targets = torch.from_numpy(r.integers(0, CLASSES, BATCH))
        self.net = ResNet(BasicBlock, [2, 2, 2, 2])
        load_params(NAME, self.net)
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        self.forward = compile(self.net)

    def step(self) -> float:
        self.net.train()
        self.optimizer.zero_grad()
        outputs = self.forward(self.inputs)
        loss = self.criterion(outputs, self.targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()
