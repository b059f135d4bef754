from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from functools import partial
from typing import Callable, List, Optional
import numpy as np, torch
from torch import nn, Tensor
from torch.nn import functional as F
torch.manual_seed(0)
def _make_divisible(v: float, divisor: int, min_value: Optional[int] = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v
class ConvBNActivation(nn.Sequential):
    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1,
                 norm_layer: Optional[Callable[..., nn.Module]] = None,
                 activation_layer: Optional[Callable[..., nn.Module]] = None):
        padding = (kernel_size - 1) // 2
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if activation_layer is None:
            activation_layer = nn.ReLU6
        super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
                         norm_layer(out_planes), activation_layer(inplace=True))
        self.out_channels = out_planes
class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels: int, squeeze_factor: int = 4):
        super().__init__()
        squeeze_channels = _make_divisible(input_channels // squeeze_factor, 8)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
    def _scale(self, input: Tensor, inplace: bool) -> Tensor:
        scale = F.adaptive_avg_pool2d(input, 1)
        scale = self.fc1(scale)
        scale = self.relu(scale)
        scale = self.fc2(scale)
        return F.hardsigmoid(scale, inplace=inplace)
    def forward(self, input: Tensor) -> Tensor:
        scale = self._scale(input, True)
        return scale * input
class SEGate(nn.Module):  # EfficientNet's form: SiLU and sigmoid
    def __init__(self, c, s):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, s, 1); self.fc2 = nn.Conv2d(s, c, 1)
        self.activation = nn.SiLU(); self.scale_activation = nn.Sigmoid()
    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return x * scale
class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int, use_se: str = "", act=nn.ReLU6):
        super().__init__()
        self.stride = stride
        assert stride in [1, 2]
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = self.stride == 1 and inp == oup
        layers: List[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNActivation(inp, hidden_dim, kernel_size=1, activation_layer=act))
        layers.append(ConvBNActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim, activation_layer=act))
        if use_se == "v3":
            layers.append(SqueezeExcitation(hidden_dim))
        elif use_se == "eff":
            layers.append(SEGate(hidden_dim, max(1, inp // 4)))
        layers.extend([nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)])
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup
    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        else:
            return self.conv(x)
class MobileNetV2(nn.Module):
    def __init__(self, num_classes=10, width_mult=0.25, round_nearest=8, dropout=0.0):
        super().__init__()
        input_channel = 32; last_channel = 128
        inverted_residual_setting = [
            # t, c, n, s, se, act
            [1, 16, 1, 1, "", nn.ReLU6],
            [6, 24, 2, 2, "v3", nn.Hardswish],
            [4, 32, 2, 2, "eff", nn.SiLU],
        ]
        input_channel = _make_divisible(input_channel * width_mult, round_nearest)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features: List[nn.Module] = [ConvBNActivation(3, input_channel, stride=2)]
        for t, c, n, s, se, act in inverted_residual_setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(InvertedResidual(input_channel, output_channel, stride, expand_ratio=t, use_se=se, act=act))
                input_channel = output_channel
        features.append(ConvBNActivation(input_channel, self.last_channel, kernel_size=1, activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out')
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)
    def _forward_impl(self, x: Tensor) -> Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        x = self.classifier(x)
        return x
    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)
model = MobileNetV2(); sync(model)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
parameters = [{"params": [p for n, p in model.named_parameters() if p.ndim > 1], "weight_decay": 4e-5},
              {"params": [p for n, p in model.named_parameters() if p.ndim <= 1], "weight_decay": 0.0}]
optimizer = torch.optim.SGD(parameters, lr=0.05, momentum=0.9, nesterov=True)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
for it in range(3):
    image = torch.from_numpy(r.standard_normal((8, 3, 32, 32)).astype(np.float32))
    target = torch.from_numpy(r.integers(0, 10, 8))
    output = fwd(image)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step(); scheduler.step()
    with torch.no_grad():
        maxk = 3
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        acc3 = correct[:maxk].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / 8)
    LOSSES += [loss.item(), acc3.item()]
LOSSES.append(F.cross_entropy(output.detach(), F.one_hot(target, 10).float() * 0.9 + 0.01, label_smoothing=0.2).item())
model.eval()
with torch.no_grad():
    out = model(torch.from_numpy(r.standard_normal((2, 3, 32, 32)).astype(np.float32)))
LOSSES.append(out.abs().sum().item())
LOSSES.append(model.features[0][1].running_var.sum().item())
