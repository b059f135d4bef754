from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from functools import partial
from typing import Callable, List
import numpy as np, torch
import torch.nn as nn
from torch import Tensor
torch.manual_seed(0)
def channel_shuffle(x: Tensor, groups: int) -> Tensor:
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    # reshape
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    # flatten
    x = x.view(batchsize, num_channels, height, width)
    return x
class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        if not (1 <= stride <= 3):
            raise ValueError("illegal stride value")
        self.stride = stride
        branch_features = oup // 2
        if (self.stride == 1) and (inp != branch_features << 1):
            raise ValueError(f"Invalid combination of stride {stride}, inp {inp} and oup {oup} values.")
        if self.stride > 1:
            self.branch1 = nn.Sequential(
                self.depthwise_conv(inp, inp, kernel_size=3, stride=self.stride, padding=1),
                nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
            )
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if (self.stride > 1) else branch_features, branch_features, kernel_size=1, stride=1,
                      padding=0, bias=False),
            nn.BatchNorm2d(branch_features),
            nn.ReLU(inplace=True),
            self.depthwise_conv(branch_features, branch_features, kernel_size=3, stride=self.stride, padding=1),
            nn.BatchNorm2d(branch_features),
            nn.Conv2d(branch_features, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
            nn.BatchNorm2d(branch_features),
            nn.ReLU(inplace=True),
        )
    @staticmethod
    def depthwise_conv(i: int, o: int, kernel_size: int, stride: int = 1, padding: int = 0,
                       bias: bool = False) -> nn.Conv2d:
        return nn.Conv2d(i, o, kernel_size, stride, padding, bias=bias, groups=i)
    def forward(self, x: Tensor) -> Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        out = channel_shuffle(out, 2)
        return out
class ShuffleNetV2(nn.Module):
    def __init__(self, stages_repeats: List[int], stages_out_channels: List[int], num_classes: int = 10,
                 inverted_residual: Callable[..., nn.Module] = InvertedResidual) -> None:
        super().__init__()
        if len(stages_repeats) != 3:
            raise ValueError("expected stages_repeats as list of 3 positive ints")
        self._stage_out_channels = stages_out_channels
        input_channels = 3
        output_channels = self._stage_out_channels[0]
        self.conv1 = nn.Sequential(
            nn.Conv2d(input_channels, output_channels, 3, 2, 1, bias=False),
            nn.BatchNorm2d(output_channels),
            nn.ReLU(inplace=True),
        )
        input_channels = output_channels
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        # Static annotations for mypy
        self.stage2: nn.Sequential
        self.stage3: nn.Sequential
        self.stage4: nn.Sequential
        stage_names = [f"stage{i}" for i in [2, 3, 4]]
        for name, repeats, output_channels in zip(stage_names, stages_repeats, self._stage_out_channels[1:]):
            seq = [inverted_residual(input_channels, output_channels, 2)]
            for i in range(repeats - 1):
                seq.append(inverted_residual(output_channels, output_channels, 1))
            setattr(self, name, nn.Sequential(*seq))
            input_channels = output_channels
        output_channels = self._stage_out_channels[-1]
        self.conv5 = nn.Sequential(
            nn.Conv2d(input_channels, output_channels, 1, 1, 0, bias=False),
            nn.BatchNorm2d(output_channels),
            nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(output_channels, num_classes)
    def _forward_impl(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        x = self.maxpool(x)
        x = self.stage2(x)
        x = self.stage3(x)
        x = self.stage4(x)
        x = self.conv5(x)
        x = x.mean([2, 3])  # globalpool
        x = self.fc(x)
        return x
    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)
model = ShuffleNetV2([2, 3, 2], [16, 24, 48, 96, 128]); sync(model)
model = model.to(memory_format=torch.channels_last)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
# the ImageNet recipe: no weight decay on BatchNorm and bias parameters
no_wd = [p for n, p in model.named_parameters() if p.ndim <= 1]
wd = [p for n, p in model.named_parameters() if p.ndim > 1]
optimizer = torch.optim.SGD([{"params": wd, "weight_decay": 4e-5}, {"params": no_wd, "weight_decay": 0}],
                            lr=0.005, momentum=0.9)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (1.0 - step / 5) if step <= 5 else 0, last_epoch=-1)
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
for it in range(4):
    images = torch.from_numpy(r.standard_normal((16, 3, 64, 64)).astype(np.float32)).to(memory_format=torch.channels_last)
    target = torch.from_numpy(r.integers(0, 10, 16))
    output = fwd(images)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        _, pred = output.max(1)
        LOSSES += [loss.item(), pred.eq(target).sum().item()]
# channel_shuffle on its own, against the index permutation it stands for
x = torch.arange(2 * 6 * 2 * 2, dtype=torch.float32).view(2, 6, 2, 2)
perm = torch.arange(6).view(2, 3).t().reshape(-1)
LOSSES.append(float(torch.equal(channel_shuffle(x, 2), x[:, perm])))
model.eval()
with torch.no_grad():
    out = fwd(torch.from_numpy(r.standard_normal((2, 3, 64, 64)).astype(np.float32)))
    x1, x2 = out.split([4, 6], dim=1)
LOSSES += [out.abs().sum().item(), x1.sum().item() - x2.sum().item()]
LOSSES.append(model.stage3[1].branch2[1].running_var.sum().item())
