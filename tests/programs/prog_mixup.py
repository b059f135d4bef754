from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader, Sampler
torch.manual_seed(0)
# an image-classification recipe as timm's train.py writes one, in miniature: a Dataset of
# uint8 HWC images with numpy augmentation, a custom collate_fn (fast_collate), mixup /
# cutmix with soft targets and label smoothing, SGD with Nesterov under OneCycleLR, gradient
# clipping, and a ModelEmaV2-style weight average evaluated at the end
class ShapesDataset(Dataset):
    def __init__(self, n, rng):
        self.images = (rng.random((n, 12, 12, 3)) * 255).astype(np.uint8)
        self.labels = rng.integers(0, 5, n)
        for i, c in enumerate(self.labels):
            self.images[i, 2 * c:2 * c + 3, :, c % 3] = 255   # a class-dependent stripe
        self.rng = rng
    def __len__(self):
        return len(self.labels)
    def __getitem__(self, idx):
        img = self.images[idx]
        if self.rng.random() < 0.5:
            img = img[:, ::-1]
        return np.ascontiguousarray(img), int(self.labels[idx])
def fast_collate(batch):
    targets = torch.tensor([b[1] for b in batch], dtype=torch.int64)
    tensor = torch.zeros((len(batch), 3, 12, 12), dtype=torch.uint8)
    for i in range(len(batch)):
        tensor[i] += torch.from_numpy(batch[i][0].transpose(2, 0, 1).copy())
    return tensor, targets
class NumpySampler(Sampler):
    def __init__(self, n, rng):
        self.n, self.rng = n, rng
    def __iter__(self):
        return iter(self.rng.permutation(self.n).tolist())
    def __len__(self):
        return self.n
def one_hot(x, num_classes, on_value=1., off_value=0.):
    x = x.long().view(-1, 1)
    return torch.full((x.size()[0], num_classes), off_value, device=x.device).scatter_(1, x, on_value)
def mixup_target(target, num_classes, lam=1., smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1. - smoothing + off_value
    y1 = one_hot(target, num_classes, on_value=on_value, off_value=off_value)
    y2 = one_hot(target.flip(0), num_classes, on_value=on_value, off_value=off_value)
    return y1 * lam + y2 * (1. - lam)
def rand_bbox(img_shape, lam, rng):
    ratio = np.sqrt(1 - lam)
    img_h, img_w = img_shape[-2:]
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    cy, cx = rng.integers(0, img_h), rng.integers(0, img_w)
    yl, yh = np.clip(cy - cut_h // 2, 0, img_h), np.clip(cy + cut_h // 2, 0, img_h)
    xl, xh = np.clip(cx - cut_w // 2, 0, img_w), np.clip(cx + cut_w // 2, 0, img_w)
    return yl, yh, xl, xh
class Mixup:
    def __init__(self, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=5, rng=None):
        self.mixup_alpha, self.cutmix_alpha, self.switch_prob = mixup_alpha, cutmix_alpha, switch_prob
        self.label_smoothing, self.num_classes, self.rng = label_smoothing, num_classes, rng
    def __call__(self, x, target):
        use_cutmix = self.rng.random() < self.switch_prob
        lam = float(self.rng.beta(self.cutmix_alpha, self.cutmix_alpha) if use_cutmix
                    else self.rng.beta(self.mixup_alpha, self.mixup_alpha))
        if use_cutmix:
            yl, yh, xl, xh = rand_bbox(x.shape, lam, self.rng)
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
            lam = 1. - (yh - yl) * (xh - xl) / float(x.shape[-2] * x.shape[-1])
        else:
            x_flipped = x.flip(0).mul_(1. - lam)
            x.mul_(lam).add_(x_flipped)
        return x, mixup_target(target, self.num_classes, lam, self.label_smoothing)
class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()
class ModelEmaV2(nn.Module):
    def __init__(self, model, decay=0.9):
        super(ModelEmaV2, self).__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay
    def _update(self, model, update_fn):
        with torch.no_grad():
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                ema_v.copy_(update_fn(ema_v, model_v))
    def update(self, model):
        self._update(model, update_fn=lambda e, m: self.decay * e + (1. - self.decay) * m)
def conv_bn(i, o, s=1):
    return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
model = nn.Sequential(conv_bn(3, 8), conv_bn(8, 16, 2), conv_bn(16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Dropout(0.0), nn.Linear(16, 5))
sync(model)
model_ema = ModelEmaV2(model)
net = comp(model)
r = np.random.default_rng(0)
dataset = ShapesDataset(24, r)
loader = DataLoader(dataset, batch_size=8, sampler=NumpySampler(len(dataset), r), collate_fn=fast_collate,
                    drop_last=True, num_workers=0)
mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255
mixup_fn = Mixup(rng=r)
train_loss_fn = SoftTargetCrossEntropy()
validate_loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
epochs = 2
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, epochs=epochs, steps_per_epoch=len(loader))
LOSSES = []
for epoch in range(epochs):
    model.train()
    for input, target in loader:
        input = input.float().sub_(mean).div_(std)
        input, target = mixup_fn(input, target)
        output = net(input)
        loss = train_loss_fn(output, target)
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0, norm_type=2.0)
        optimizer.step()
        model_ema.update(model)
        scheduler.step()
        LOSSES += [loss.item(), norm.item(), scheduler.get_last_lr()[0]]
model.eval()
with torch.no_grad():
    for input, target in DataLoader(dataset, batch_size=12, collate_fn=fast_collate):
        input = input.float().sub_(mean).div_(std)
        for m in (net, model_ema.module):
            output = m(input)
            acc1 = (output.argmax(1) == target).float().mean() * 100
            LOSSES += [validate_loss_fn(output, target).item(), acc1.item()]
