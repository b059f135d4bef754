from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from collections import OrderedDict
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# A video classifier as torchvision.models.video writes R(2+1)D: each 3x3x3 conv factored
# into a spatial (1,3,3) and a temporal (3,1,1) Conv3d with a BatchNorm3d between, basic
# residual blocks with a strided downsample, a C3D-style MaxPool3d in the stem, and
# AdaptiveAvgPool3d before the classifier; clips are (N, C, T, H, W). Trained by SGD with
# label smoothing under a MultiStepLR; evaluated by averaging two clips' softmax.
class Conv2Plus1D(nn.Sequential):
    def __init__(self, in_planes, out_planes, midplanes, stride=1, padding=1):
        super().__init__(
            nn.Conv3d(in_planes, midplanes, kernel_size=(1, 3, 3), stride=(1, stride, stride),
                      padding=(0, padding, padding), bias=False),
            nn.BatchNorm3d(midplanes),
            nn.ReLU(inplace=True),
            nn.Conv3d(midplanes, out_planes, kernel_size=(3, 1, 1), stride=(stride, 1, 1),
                      padding=(padding, 0, 0), bias=False))
    @staticmethod
    def get_downsample_stride(stride):
        return stride, stride, stride
class BasicBlock(nn.Module):
    expansion = 1
    def __init__(self, inplanes, planes, conv_builder, stride=1, downsample=None):
        midplanes = (inplanes * planes * 3 * 3 * 3) // (inplanes * 3 * 3 + 3 * planes)
        super().__init__()
        self.conv1 = nn.Sequential(conv_builder(inplanes, planes, midplanes, stride),
                                   nn.BatchNorm3d(planes), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv_builder(planes, planes, midplanes), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride
    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.conv2(out)
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        out = self.relu(out)
        return out
class R2Plus1dStem(nn.Sequential):
    def __init__(self, width=12):
        super().__init__(OrderedDict([
            ("conv_s", nn.Conv3d(3, width, kernel_size=(1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False)),
            ("bn_s", nn.BatchNorm3d(width)),
            ("relu_s", nn.ReLU(inplace=True)),
            ("conv_t", nn.Conv3d(width, 16, kernel_size=(3, 1, 1), stride=(1, 1, 1), padding=(1, 0, 0), bias=False)),
            ("bn_t", nn.BatchNorm3d(16)),
            ("relu_t", nn.ReLU(inplace=True)),
            ("pool", nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)))]))
class VideoResNet(nn.Module):
    def __init__(self, block=BasicBlock, conv_makers=(Conv2Plus1D,) * 3, layers=(1, 1, 1), num_classes=5):
        super().__init__()
        self.inplanes = 16
        self.stem = R2Plus1dStem()
        self.layer1 = self._make_layer(block, conv_makers[0], 16, layers[0], stride=1)
        self.layer2 = self._make_layer(block, conv_makers[1], 24, layers[1], stride=2)
        self.layer3 = self._make_layer(block, conv_makers[2], 32, layers[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(32 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)
    def forward(self, x):
        x = self.stem(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.avgpool(x)
        x = x.flatten(1)
        x = self.fc(x)
        return x
    def _make_layer(self, block, conv_builder, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            ds_stride = conv_builder.get_downsample_stride(stride)
            downsample = nn.Sequential(
                nn.Conv3d(self.inplanes, planes * block.expansion, kernel_size=1, stride=ds_stride, bias=False),
                nn.BatchNorm3d(planes * block.expansion))
        layers = [block(self.inplanes, planes, conv_builder, stride, downsample)]
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes, conv_builder))
        return nn.Sequential(*layers)
class C3DHead(nn.Module):
    """A C3D-style auxiliary branch on the stem's features: 3x3x3 convs, MaxPool3d (2,2,2)."""
    def __init__(self, num_classes=5):
        super().__init__()
        self.conv = nn.Conv3d(16, 16, kernel_size=3, padding=1)
        self.pool = nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2))
        self.fc = nn.Linear(16, num_classes)
    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))
        return self.fc(F.adaptive_max_pool3d(x, 1).view(x.size(0), -1))
model = VideoResNet(); aux = C3DHead(); sync(model, aux)
net = comp(model)
params = list(model.parameters()) + list(aux.parameters())
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.1)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
rng = np.random.default_rng(0)
LOSSES = []
def clip(n=2, T=8, S=32):
    # a video decoder's (N, T, H, W, C) uint8 frames -> normalised (N, C, T, H, W) floats
    frames = torch.from_numpy(rng.integers(0, 256, (n, T, S, S, 3), dtype=np.uint8))
    x = frames.permute(0, 4, 1, 2, 3).float().div_(255.0)
    mean = torch.tensor([0.43216, 0.394666, 0.37645]).view(1, 3, 1, 1, 1)
    std = torch.tensor([0.22803, 0.22145, 0.216989]).view(1, 3, 1, 1, 1)
    return (x - mean) / std
for step in range(5):
    model.train(); aux.train()
    x = clip(); y = torch.from_numpy(rng.integers(0, 5, 2))
    out = net(x)
    aux_out = aux(model.stem(x).detach())
    loss = criterion(out, y) + 0.3 * F.cross_entropy(aux_out, y)
    opt.zero_grad()
    loss.backward()
    opt.step(); sched.step()
    LOSSES += [loss.item(), sched.get_last_lr()[0]]
model.eval()
with torch.no_grad():
    x1, x2 = clip(3), clip(3)
    probs = torch.stack([F.softmax(net(c), dim=1) for c in (x1, x2)]).mean(0)
    LOSSES += [probs.max(1)[0].sum().item(), probs[:, 0].sum().item(),
               model.layer2[0].downsample[1].running_mean.abs().sum().item(),
               model.stem.bn_t.num_batches_tracked.item()]
