from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from collections import OrderedDict
from typing import Dict, List
import numpy as np, torch
from torch import nn, Tensor
from torch.nn import functional as F
torch.manual_seed(0)
class IntermediateLayerGetter(nn.ModuleDict):
    """torchvision's: runs a backbone's children in order, returning the named ones."""
    def __init__(self, model: nn.Module, return_layers: Dict[str, str]) -> None:
        if not set(return_layers).issubset([name for name, _ in model.named_children()]):
            raise ValueError("return_layers are not present in model")
        orig_return_layers = return_layers
        return_layers = {str(k): str(v) for k, v in return_layers.items()}
        layers = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            if name in return_layers:
                del return_layers[name]
            if not return_layers:
                break
        super().__init__(layers)
        self.return_layers = orig_return_layers
    def forward(self, x):
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out_name = self.return_layers[name]
                out[out_name] = x
        return out
def conv_bn(i, o, stride=1, dilation=1):
    return nn.Sequential(nn.Conv2d(i, o, 3, stride, padding=dilation, dilation=dilation, bias=False),
                         nn.BatchNorm2d(o), nn.ReLU(inplace=True))
class Backbone(nn.Module):   # output stride 8: the last stage dilated instead of strided
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 16, 2)
        self.layer1 = conv_bn(16, 24, 2)
        self.layer2 = conv_bn(24, 32, 2)
        self.layer3 = nn.Sequential(conv_bn(32, 48, 1, dilation=2), conv_bn(48, 48, 1, dilation=2))
        self.head = nn.Linear(48, 10)   # classification head the segmentation model drops
class ASPPConv(nn.Sequential):
    def __init__(self, in_channels: int, out_channels: int, dilation: int) -> None:
        modules = [
            nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        ]
        super().__init__(*modules)
class ASPPPooling(nn.Sequential):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(in_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
        )
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        for mod in self:
            x = mod(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)
class ASPP(nn.Module):
    def __init__(self, in_channels: int, atrous_rates: List[int], out_channels: int = 32) -> None:
        super().__init__()
        modules = []
        modules.append(
            nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels), nn.ReLU())
        )
        rates = tuple(atrous_rates)
        for rate in rates:
            modules.append(ASPPConv(in_channels, out_channels, rate))
        modules.append(ASPPPooling(in_channels, out_channels))
        self.convs = nn.ModuleList(modules)
        self.project = nn.Sequential(
            nn.Conv2d(len(self.convs) * out_channels, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(),
            nn.Dropout(0.0),
        )
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _res = []
        for conv in self.convs:
            _res.append(conv(x))
        res = torch.cat(_res, dim=1)
        return self.project(res)
class DeepLabHead(nn.Sequential):
    def __init__(self, in_channels: int, num_classes: int, atrous_rates=(6, 12, 18)) -> None:
        super().__init__(
            ASPP(in_channels, atrous_rates),
            nn.Conv2d(32, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, num_classes, 1),
        )
class FCNHead(nn.Sequential):
    def __init__(self, in_channels: int, channels: int) -> None:
        inter_channels = in_channels // 4
        layers = [
            nn.Conv2d(in_channels, inter_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(inter_channels),
            nn.ReLU(),
            nn.Conv2d(inter_channels, channels, 1),
        ]
        super().__init__(*layers)
class DeepLabV3(nn.Module):
    def __init__(self, backbone: nn.Module, classifier: nn.Module, aux_classifier=None) -> None:
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier
        self.aux_classifier = aux_classifier
    def forward(self, x: Tensor) -> Dict[str, Tensor]:
        input_shape = x.shape[-2:]
        # contract: features is a dict of tensors
        features = self.backbone(x)
        result = OrderedDict()
        x = features["out"]
        x = self.classifier(x)
        x = F.interpolate(x, size=input_shape, mode="bilinear", align_corners=False)
        result["out"] = x
        if self.aux_classifier is not None:
            x = features["aux"]
            x = self.aux_classifier(x)
            x = F.interpolate(x, size=input_shape, mode="bilinear", align_corners=False)
            result["aux"] = x
        return result
NUM_CLASSES = 5
backbone = IntermediateLayerGetter(Backbone(), return_layers={"layer3": "out", "layer2": "aux"})
model = DeepLabV3(backbone, DeepLabHead(48, NUM_CLASSES), FCNHead(32, NUM_CLASSES)); sync(model)
def criterion(inputs, target):
    losses = {}
    for name, x in inputs.items():
        losses[name] = nn.functional.cross_entropy(x, target, ignore_index=255)
    if len(losses) == 1:
        return losses["out"]
    return losses["out"] + 0.5 * losses["aux"]
params_to_optimize = [
    {"params": [p for p in model.backbone.parameters() if p.requires_grad]},
    {"params": [p for p in model.classifier.parameters() if p.requires_grad]},
    {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.01 * 10},
]
optimizer = torch.optim.SGD(params_to_optimize, lr=0.01, momentum=0.9, weight_decay=1e-4)
iters_per_epoch, epochs = 2, 2
lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda x: (1 - x / (iters_per_epoch * epochs)) ** 0.9)
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
for it in range(iters_per_epoch * epochs):
    image = torch.from_numpy(r.standard_normal((4, 3, 48, 40)).astype(np.float32))
    target = torch.from_numpy(r.integers(0, NUM_CLASSES, (4, 48, 40)))
    target[:, :4] = 255                       # the void border VOC marks
    target[r.random((4, 48, 40)) < 0.1] = 255
    output = fwd(image)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    lr_scheduler.step()
    LOSSES += [loss.item(), optimizer.param_groups[2]["lr"]]
# evaluation: argmax per pixel into a confusion matrix by bincount (torchvision's ConfusionMatrix)
model.eval()
with torch.inference_mode():
    image = torch.from_numpy(r.standard_normal((2, 3, 48, 40)).astype(np.float32))
    target = torch.from_numpy(r.integers(0, NUM_CLASSES, (2, 48, 40)))
    output = fwd(image)["out"]
    a, b = target.flatten(), output.argmax(1).flatten()
    n = NUM_CLASSES
    k = (a >= 0) & (a < n)
    inds = n * a[k].to(torch.int64) + b[k]
    mat = torch.bincount(inds, minlength=n**2).reshape(n, n)
    h = mat.float()
    acc_global = torch.diag(h).sum() / h.sum()
    iu = torch.diag(h) / (h.sum(1) + h.sum(0) - torch.diag(h))
LOSSES += [output.abs().sum().item(), acc_global.item(), iu.mean().item()]
