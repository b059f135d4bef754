from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
torch.manual_seed(0)
# EfficientNet's MBConv blocks as torchvision writes them, scaled down: expansion, depthwise
# conv, squeeze-excitation with SiLU and sigmoid, projection, stochastic depth (row mode,
# rate growing with depth) on the residual; AdamW under a linear warmup then cosine
# annealing (SequentialLR), gradient clipping, and two weight averages: AveragedModel with
# get_ema_multi_avg_fn and a hand-written EMA (lerp_ on parameters, mul_().add_() on
# buffers). The compared run trains at drop rate 0 (the frameworks' random generators
# differ); a rate of 0.5 is then checked for what it must give: each sample dropped or
# scaled by 1/(1-p)
def stochastic_depth(input, p: float, mode: str, training: bool = True):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    if mode == "row":
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise
class StochasticDepth(nn.Module):
    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode
    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)
class Conv2dNormActivation(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1, activation_layer=nn.SiLU):
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(out_channels, eps=1e-3, momentum=0.01)]
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)
class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_channels, activation=nn.SiLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()
    def _scale(self, input):
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)
    def forward(self, input):
        scale = self._scale(input)
        return scale * input
class MBConv(nn.Module):
    def __init__(self, input_channels, out_channels, kernel, stride, expand_ratio, stochastic_depth_prob):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        layers = []
        expanded_channels = input_channels * expand_ratio
        if expanded_channels != input_channels:
            layers.append(Conv2dNormActivation(input_channels, expanded_channels, kernel_size=1))
        layers.append(Conv2dNormActivation(expanded_channels, expanded_channels, kernel_size=kernel, stride=stride, groups=expanded_channels))
        squeeze_channels = max(1, input_channels // 4)
        layers.append(SqueezeExcitation(expanded_channels, squeeze_channels, activation=nn.SiLU))
        layers.append(Conv2dNormActivation(expanded_channels, out_channels, kernel_size=1, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = out_channels
    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += input
        return result
class EfficientNet(nn.Module):
    def __init__(self, stochastic_depth_prob=0.2, num_classes=6):
        super().__init__()
        # (expand_ratio, kernel, stride, input_channels, out_channels, num_layers)
        setting = [(1, 3, 1, 8, 8, 1), (4, 3, 2, 8, 12, 2), (4, 5, 2, 12, 16, 2)]
        layers = [Conv2dNormActivation(3, 8, kernel_size=3, stride=2)]
        total_stage_blocks = sum(s[-1] for s in setting)
        stage_block_id = 0
        for expand_ratio, kernel, stride, cin, cout, n in setting:
            stage = []
            for i in range(n):
                sd_prob = stochastic_depth_prob * float(stage_block_id) / total_stage_blocks
                stage.append(MBConv(cin if i == 0 else cout, cout, kernel, stride if i == 0 else 1, expand_ratio, sd_prob))
                stage_block_id += 1
            layers.append(nn.Sequential(*stage))
        layers.append(Conv2dNormActivation(16, 32, kernel_size=1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.0, inplace=True), nn.Linear(32, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                init_range = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -init_range, init_range)
                nn.init.zeros_(m.bias)
    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)
model = EfficientNet(stochastic_depth_prob=0.0); sync(model)
ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
ema_hand = copy.deepcopy(model)
for p in ema_hand.parameters():
    p.requires_grad_(False)
decay = 0.9
@torch.no_grad()
def update_ema(ema, net):
    for ema_p, p in zip(ema.parameters(), net.parameters()):
        ema_p.lerp_(p, 1.0 - decay)
    for ema_b, b in zip(ema.buffers(), net.buffers()):
        if ema_b.dtype.is_floating_point:
            ema_b.mul_(decay).add_(b, alpha=1.0 - decay)
        else:
            ema_b.copy_(b)
# eps 1e-6: a projection BatchNorm's bias feeds the next block's BatchNorm, which removes
# any shift, so its gradient is rounding noise that Adam would scale up to full steps
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05, eps=1e-6)
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2)
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=1e-5)
scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[warmup, cosine], milestones=[2])
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
for step in range(5):
    model.train()
    x = torch.from_numpy(r.standard_normal((8, 3, 24, 24)).astype(np.float32))
    y = torch.from_numpy(r.integers(0, 6, 8))
    loss = criterion(fwd(x), y)
    optimizer.zero_grad()
    loss.backward()
    gn = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    scheduler.step()
    ema_model.update_parameters(model)
    update_ema(ema_hand, model)
    LOSSES += [loss.item(), gn.item(), scheduler.get_last_lr()[0]]
x = torch.from_numpy(r.standard_normal((4, 3, 24, 24)).astype(np.float32))
model.eval(); ema_model.eval(); ema_hand.eval()
with torch.no_grad():
    a, b, c = fwd(x), ema_model(x), ema_hand(x)
LOSSES += [a.pow(2).mean().item(), b.pow(2).mean().item(), c.pow(2).mean().item(), (b - c).abs().max().item() < 1e-5]
LOSSES.append(ema_model.n_averaged.item())
# stochastic depth at rate 0.5: every row dropped or kept and scaled by 2
sd = StochasticDepth(0.5, "row")
out = sd(torch.ones(64, 3, 2, 2))
rows = out.flatten(1)
kept = (rows == 2.0).all(dim=1)
dropped = (rows == 0.0).all(dim=1)
LOSSES += [float(bool((kept | dropped).all())), float(0 < int(kept.sum()) < 64)]
sd.eval()
LOSSES.append(float(torch.equal(sd(out), out)))
