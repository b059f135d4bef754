from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import os, tempfile, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from contextlib import suppress
from copy import deepcopy
from torch.utils.data import TensorDataset, DataLoader
torch.manual_seed(0)
np.random.seed(0)
# timm's training utilities around a small ResNet: the backend switches train.py sets,
# ModelEmaV3 (torch._foreach_lerp_ on parameters, _foreach_mul_/_foreach_add_ as the
# fallback, buffers copied), Mixup/CutMix with rand_bbox and np.random.beta on the global
# numpy stream, SoftTargetCrossEntropy, AdamW with timm's no-weight-decay group for 1-d
# parameters, NativeScaler (a GradScaler disabled on CPU, clip_grad_norm_(foreach=True)),
# zero_grad(set_to_none=True), CosineAnnealingWarmRestarts stepped by fractional epochs,
# and CheckpointSaver-style save / resume of model, EMA, optimizer, scheduler and scaler
# in the middle of an epoch, the resumed run matching the uninterrupted one
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("high")
torch.use_deterministic_algorithms(False)
class BasicBlock(nn.Module):
    expansion = 1
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = downsample
    def zero_init_last(self):
        if getattr(self.bn2, 'weight', None) is not None:
            nn.init.zeros_(self.bn2.weight)
    def forward(self, x):
        shortcut = x
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.bn2(self.conv2(x))
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        x += shortcut
        return self.act2(x)
class ResNet(nn.Module):
    def __init__(self, num_classes=4, widths=(8, 16)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act1 = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(widths[0], widths[0])
        self.layer2 = BasicBlock(widths[0], widths[1], 2, nn.Sequential(
            nn.Conv2d(widths[0], widths[1], 1, 2, bias=False), nn.BatchNorm2d(widths[1])))
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[1], num_classes)
        for n, m in self.named_modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
        for m in self.modules():
            if hasattr(m, 'zero_init_last'):
                m.zero_init_last()
    def forward_features(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        return self.layer2(self.layer1(x))
    def forward_head(self, x, pre_logits: bool = False):
        x = self.global_pool(x).flatten(1)
        return x if pre_logits else self.fc(x)
    def forward(self, x):
        return self.forward_head(self.forward_features(x))
class ModelEmaV3(nn.Module):
    def __init__(self, model, decay=0.9999, min_decay=0.0, use_warmup=False, warmup_gamma=1.0,
                 warmup_power=2 / 3, foreach=True, exclude_buffers=False):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay, self.min_decay = decay, min_decay
        self.use_warmup, self.warmup_gamma, self.warmup_power = use_warmup, warmup_gamma, warmup_power
        self.foreach, self.exclude_buffers = foreach, exclude_buffers
    def get_decay(self, step=None):
        if step is None:
            return self.decay
        step = max(0, step - 1)
        if step <= 0:
            return 0.0
        if self.use_warmup:
            decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
            decay = max(min(decay, self.decay), self.min_decay)
        else:
            decay = self.decay
        return decay
    @torch.no_grad()
    def update(self, model, step=None):
        decay = self.get_decay(step)
        if self.exclude_buffers:
            self.apply_update_no_buffers_(model, decay)
        else:
            self.apply_update_(model, decay)
    def apply_update_(self, model, decay: float):
        if self.foreach:
            ema_lerp_values, model_lerp_values = [], []
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if ema_v.is_floating_point():
                    ema_lerp_values.append(ema_v)
                    model_lerp_values.append(model_v)
                else:
                    ema_v.copy_(model_v)
            if hasattr(torch, '_foreach_lerp_'):
                torch._foreach_lerp_(ema_lerp_values, model_lerp_values, weight=1. - decay)
            else:
                torch._foreach_mul_(ema_lerp_values, scalar=decay)
                torch._foreach_add_(ema_lerp_values, model_lerp_values, alpha=1. - decay)
        else:
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if ema_v.is_floating_point():
                    ema_v.lerp_(model_v.to(device=ema_v.device), weight=1. - decay)
                else:
                    ema_v.copy_(model_v.to(device=ema_v.device))
    def apply_update_no_buffers_(self, model, decay: float):
        ema_params = tuple(self.module.parameters())
        model_params = tuple(model.parameters())
        torch._foreach_mul_(ema_params, scalar=decay)
        torch._foreach_add_(ema_params, model_params, alpha=1 - decay)
        for ema_b, model_b in zip(self.module.buffers(), model.buffers()):
            ema_b.copy_(model_b.to(device=ema_b.device))
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)
def one_hot(x, num_classes, on_value=1., off_value=0.):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=x.device).scatter_(1, x, on_value)
def mixup_target(target, num_classes, lam=1., smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1. - lam)
def rand_bbox(img_shape, lam, margin=0., count=None):
    ratio = np.sqrt(1 - lam)
    img_h, img_w = img_shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    margin_y, margin_x = int(margin * cut_h), int(margin * cut_w)
    cy = np.random.randint(0 + margin_y, img_h - margin_y, size=count)
    cx = np.random.randint(0 + margin_x, img_w - margin_x, size=count)
    yl = np.clip(cy - cut_h // 2, 0, img_h)
    yh = np.clip(cy + cut_h // 2, 0, img_h)
    xl = np.clip(cx - cut_w // 2, 0, img_w)
    xh = np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh
def cutmix_bbox_and_lam(img_shape, lam, correct_lam=True, count=None):
    yl, yu, xl, xu = rand_bbox(img_shape, lam, count=count)
    if correct_lam:
        bbox_area = (yu - yl) * (xu - xl)
        lam = 1. - bbox_area / float(img_shape[-2] * img_shape[-1])
    return (yl, yu, xl, xu), lam
class Mixup:
    def __init__(self, mixup_alpha=1., cutmix_alpha=0., prob=1.0, switch_prob=0.5, correct_lam=True,
                 label_smoothing=0.1, num_classes=1000):
        self.mixup_alpha, self.cutmix_alpha = mixup_alpha, cutmix_alpha
        self.mix_prob, self.switch_prob = prob, switch_prob
        self.label_smoothing, self.num_classes = label_smoothing, num_classes
        self.correct_lam = correct_lam
        self.mixup_enabled = True
    def _params_per_batch(self):
        lam = 1.
        use_cutmix = False
        if self.mixup_enabled and np.random.rand() < self.mix_prob:
            if self.mixup_alpha > 0. and self.cutmix_alpha > 0.:
                use_cutmix = np.random.rand() < self.switch_prob
                lam_mix = np.random.beta(self.cutmix_alpha, self.cutmix_alpha) if use_cutmix else \
                    np.random.beta(self.mixup_alpha, self.mixup_alpha)
            elif self.mixup_alpha > 0.:
                lam_mix = np.random.beta(self.mixup_alpha, self.mixup_alpha)
            lam = float(lam_mix)
        return lam, use_cutmix
    def _mix_batch(self, x):
        lam, use_cutmix = self._params_per_batch()
        if lam == 1.:
            return 1.
        if use_cutmix:
            (yl, yh, xl, xh), lam = cutmix_bbox_and_lam(x.shape, lam, correct_lam=self.correct_lam)
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        else:
            x_flipped = x.flip(0).mul_(1. - lam)
            x.mul_(lam).add_(x_flipped)
        return lam
    def __call__(self, x, target):
        assert len(x) % 2 == 0, 'Batch size should be even when using this'
        lam = self._mix_batch(x)
        target = mixup_target(target, self.num_classes, lam, self.label_smoothing)
        return x, target
class SoftTargetCrossEntropy(nn.Module):
    def __init__(self):
        super(SoftTargetCrossEntropy, self).__init__()
    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()
class NativeScaler:
    state_dict_key = "amp_scaler"
    def __init__(self, device='cuda'):
        self._scaler = torch.amp.GradScaler(device, enabled=False)
    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, create_graph=False):
        self._scaler.scale(loss).backward(create_graph=create_graph)
        norm = None
        if clip_grad is not None:
            self._scaler.unscale_(optimizer)  # unscale the gradients of optimizer's assigned params in-place
            norm = torch.nn.utils.clip_grad_norm_(parameters, clip_grad, foreach=True)
        self._scaler.step(optimizer)
        self._scaler.update()
        return norm
    def state_dict(self):
        return self._scaler.state_dict()
    def load_state_dict(self, state_dict):
        self._scaler.load_state_dict(state_dict)
def param_groups_weight_decay(model, weight_decay=1e-5, no_weight_decay_list=()):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay_list:
            no_decay.append(param)
        else:
            decay.append(param)
    return [{'params': no_decay, 'weight_decay': 0.}, {'params': decay, 'weight_decay': weight_decay}]
def make(sync_weights):
    model = ResNet()
    if sync_weights:
        sync(model)
    model_ema = ModelEmaV3(model, decay=0.998, use_warmup=True, warmup_gamma=1.0)
    optimizer = torch.optim.AdamW(param_groups_weight_decay(model, 0.05), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=1, T_mult=2, eta_min=1e-5)
    return model, model_ema, optimizer, scheduler, NativeScaler()
rng = np.random.default_rng(0)
images = rng.standard_normal((32, 3, 10, 10)).astype(np.float32)
labels = rng.integers(0, 4, 32)
for i, c in enumerate(labels):
    images[i, c % 3, 2 * c:2 * c + 3] += 2.0
loader = DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=8,
                    shuffle=False, drop_last=True)
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=4)
train_loss_fn = SoftTargetCrossEntropy()
amp_autocast = suppress   # do nothing
def train_one_epoch(epoch, model, fwd, model_ema, optimizer, lr_scheduler, loss_scaler, stop_at=None, start_at=0):
    losses = []
    num_updates = epoch * len(loader) + start_at
    model.train()
    for batch_idx, (input, target) in enumerate(loader):
        if batch_idx < start_at:
            continue
        if stop_at is not None and batch_idx == stop_at:
            break
        input, target = mixup_fn(input.clone(), target)
        with amp_autocast():
            output = fwd(input)
            loss = train_loss_fn(output, target)
        optimizer.zero_grad(set_to_none=True)
        norm = loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
        num_updates += 1
        model_ema.update(model, step=num_updates)
        lr_scheduler.step(epoch + (batch_idx + 1) / len(loader))
        losses += [loss.item(), norm.item(), optimizer.param_groups[0]['lr']]
    return losses
def validate(model):
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(images))
        loss = F.cross_entropy(out, torch.from_numpy(labels))
        acc = (out.argmax(-1) == torch.from_numpy(labels)).float().mean() * 100
    return [loss.item(), acc.item()]
state = np.random.get_state()
model, model_ema, optimizer, scheduler, scaler = make(True)
fwd = comp(model)
LOSSES = train_one_epoch(0, model, fwd, model_ema, optimizer, scheduler, scaler)
LOSSES += train_one_epoch(1, model, fwd, model_ema, optimizer, scheduler, scaler, stop_at=2)
path = os.path.join(tempfile.mkdtemp(), "last.pth.tar")
torch.save({'epoch': 1, 'arch': 'resnet_tiny', 'state_dict': model.state_dict(), 'optimizer': optimizer.state_dict(),
            'state_dict_ema': model_ema.state_dict(), 'scheduler': scheduler.state_dict(),
            scaler.state_dict_key: scaler.state_dict(), 'np_rng': np.random.get_state()}, path)
straight = train_one_epoch(1, model, fwd, model_ema, optimizer, scheduler, scaler, start_at=2)
LOSSES += straight + validate(model) + validate(model_ema)
# resume in fresh objects from the file, as train.py's --resume does
model2, ema2, optimizer2, scheduler2, scaler2 = make(False)
checkpoint = torch.load(path, map_location='cpu', weights_only=False)
model2.load_state_dict(checkpoint['state_dict'])
ema2.load_state_dict(checkpoint['state_dict_ema'])
optimizer2.load_state_dict(checkpoint['optimizer'])
scheduler2.load_state_dict(checkpoint['scheduler'])
scaler2.load_state_dict(checkpoint[scaler2.state_dict_key])
np.random.set_state(checkpoint['np_rng'])
resumed = train_one_epoch(checkpoint['epoch'], model2, comp(model2), ema2, optimizer2, scheduler2, scaler2, start_at=2)
LOSSES += [float(resumed == straight)] + validate(ema2)
LOSSES.append(float(all(bool(torch.equal(a, b)) for a, b in zip(ema2.state_dict().values(), model_ema.state_dict().values()))))
