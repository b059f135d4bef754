from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# ConvNeXt (Liu et al. 2022) as facebookresearch/ConvNeXt writes it, scaled down: a patchify
# stem, blocks of a depthwise 7x7 conv, LayerNorm over channels by permuting to channels
# last, an inverted-bottleneck MLP of nn.Linear with GELU, layer scale (gamma) and DropPath
# by torch.rand per sample; the channels_first LayerNorm of the stem and the downsampling
# layers written out by mean/pow; trunc_normal_ init; AdamW with a linear-warmup cosine
# schedule set by hand per step into each param_group (weight decay off for norms and
# biases), channels_last inputs. The compared run trains at drop rate 0 (the frameworks'
# generators differ); DropPath at 0.5 is then checked for what it must give
def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
    random_tensor.floor_()
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor
class DropPath(nn.Module):
    def __init__(self, drop_prob=None):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)
class LayerNorm(nn.Module):
    r"""LayerNorm that supports two data formats: channels_last (default) or channels_first."""
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape, )
    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x
class Block(nn.Module):
    def __init__(self, dim, drop_path=0., layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)  # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)  # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim)),
                                  requires_grad=True) if layer_scale_init_value > 0 else None
        self.drop_path = DropPath(drop_path) if drop_path > 0. else nn.Identity()
    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        if self.gamma is not None:
            x = self.gamma * x
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        x = input + self.drop_path(x)
        return x
class ConvNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, depths=[2, 2, 2], dims=[16, 32, 64],
                 drop_path_rate=0., layer_scale_init_value=0.1, head_init_scale=1.):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=2, stride=2),
                             LayerNorm(dims[0], eps=1e-6, data_format="channels_first"))
        self.downsample_layers.append(stem)
        for i in range(len(dims) - 1):
            downsample_layer = nn.Sequential(
                LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                nn.Conv2d(dims[i], dims[i+1], kernel_size=2, stride=2))
            self.downsample_layers.append(downsample_layer)
        self.stages = nn.ModuleList()
        dp_rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(len(dims)):
            stage = nn.Sequential(*[Block(dim=dims[i], drop_path=dp_rates[cur + j],
                                          layer_scale_init_value=layer_scale_init_value) for j in range(depths[i])])
            self.stages.append(stage)
            cur += depths[i]
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)  # final norm layer
        self.head = nn.Linear(dims[-1], num_classes)
        self.apply(self._init_weights)
        self.head.weight.data.mul_(head_init_scale)
        self.head.bias.data.mul_(head_init_scale)
    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=.02)
            nn.init.constant_(m.bias, 0)
    def forward_features(self, x):
        for i in range(len(self.stages)):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return self.norm(x.mean([-2, -1]))  # global average pooling, (N, C, H, W) -> (N, C)
    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x
def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0, start_warmup_value=0):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)
    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = np.array([final_value + 0.5 * (base_value - final_value) * (1 + math.cos(math.pi * i / (len(iters)))) for i in iters])
    schedule = np.concatenate((warmup_schedule, schedule))
    assert len(schedule) == epochs * niter_per_ep
    return schedule
def param_groups_weight_decay(model, weight_decay=1e-5):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name.endswith(".gamma"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{'params': no_decay, 'weight_decay': 0.}, {'params': decay, 'weight_decay': weight_decay}]
model = ConvNeXt(); sync(model)
model = model.to(memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(param_groups_weight_decay(model, 0.05), lr=4e-3, betas=(0.9, 0.999))
lr_schedule = cosine_scheduler(4e-3, 1e-5, epochs=3, niter_per_ep=2, warmup_epochs=1)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
net = comp(model)
r = np.random.default_rng(0)
LOSSES = []
for it in range(6):
    for i, param_group in enumerate(optimizer.param_groups):
        param_group["lr"] = lr_schedule[it]
    samples = torch.from_numpy(r.standard_normal((8, 3, 32, 32)).astype(np.float32))
    samples = samples.contiguous(memory_format=torch.channels_last)
    targets = torch.from_numpy(r.integers(0, 10, 8))
    model.train()
    output = net(samples)
    loss = criterion(output, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
    optimizer.step()
    LOSSES += [loss.item(), float(grad_norm), (output.argmax(-1) == targets).float().mean().item()]
LOSSES.append(model.stages[2][1].gamma.abs().mean().item())
model.eval()
with torch.no_grad():
    x = torch.from_numpy(r.standard_normal((4, 3, 32, 32)).astype(np.float32))
    LOSSES += net(x).softmax(-1).max(-1).values.tolist()
# DropPath at 0.5: each sample kept and scaled by 2 or dropped
dp = DropPath(0.5).train()
x = torch.ones(64, 3, 2, 2)
y = dp(x)
per = y.flatten(1)
assert bool(((per == 0).all(1) | (per == 2).all(1)).all()), per
kept = (per[:, 0] == 2).float().mean().item()
assert 0.2 < kept < 0.8, kept
assert torch.equal(dp.eval()(x), x)
