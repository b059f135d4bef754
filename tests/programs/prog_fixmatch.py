from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.optim.lr_scheduler import LambdaLR
torch.manual_seed(0)
# FixMatch as kekmodel/FixMatch-pytorch's train.py writes it: labeled and unlabeled loaders
# cycled by next(iter) until StopIteration, a Dataset giving weak (flip, reflect-pad crop) and
# strong (plus cutout) views, labeled and both unlabeled batches interleave()d into one
# forward and de_interleave()d back, pseudo-labels by torch.max over a tempered softmax
# masked by max_probs.ge(threshold), SGD with Nesterov and param groups without decay for
# biases and BatchNorm, the cosine schedule with warmup by LambdaLR, ModelEMA copying
# state_dict entries (parameters blended, buffers copied) and evaluating the EMA model; the
# augmentations and sampler draw with numpy (a Sampler subclass)
def interleave(x, size):
    s = list(x.shape)
    return x.reshape([-1, size] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])
def de_interleave(x, size):
    s = list(x.shape)
    return x.reshape([size, -1] + s[1:]).transpose(0, 1).reshape([-1] + s[1:])
class NumpyRandomSampler(Sampler):
    def __init__(self, data_source, num_samples, seed):
        self.n, self.num_samples, self.rng = len(data_source), num_samples, np.random.default_rng(seed)
    def __iter__(self):
        return iter(self.rng.integers(0, self.n, self.num_samples).tolist())
    def __len__(self):
        return self.num_samples
class TransformFixMatch:
    def __init__(self, rng):
        self.rng = rng
    def weak(self, x):
        if self.rng.random() < 0.5:
            x = torch.flip(x, dims=[2])
        i, j = self.rng.integers(0, 5, 2)
        return F.pad(x[None], (2, 2, 2, 2), mode="reflect")[0, :, i:i + 8, j:j + 8]
    def strong(self, x):
        x = self.weak(x).clone()
        i, j = self.rng.integers(0, 6, 2)
        x[:, i:i + 3, j:j + 3] = 0.5   # cutout
        return x
    def __call__(self, x):
        return self.weak(x), self.strong(x)
class SSLDataset(Dataset):
    def __init__(self, images, targets, transform):
        self.images, self.targets, self.transform = images, targets, transform
    def __getitem__(self, index):
        img = self.images[index]
        return self.transform(img), self.targets[index]
    def __len__(self):
        return len(self.images)
class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, activate_before_residual=False):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes, momentum=0.001)
        self.relu1 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes, momentum=0.001)
        self.relu2 = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1,
                                                                stride=stride, padding=0, bias=False) or None
        self.activate_before_residual = activate_before_residual
    def forward(self, x):
        if not self.equalInOut and self.activate_before_residual == True:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)
class WideResNet(nn.Module):
    def __init__(self, num_classes, widen_factor=2):
        super(WideResNet, self).__init__()
        channels = [4, 4 * widen_factor, 8 * widen_factor]
        self.conv1 = nn.Conv2d(3, channels[0], kernel_size=3, stride=1, padding=1, bias=False)
        self.block1 = BasicBlock(channels[0], channels[1], 1, activate_before_residual=True)
        self.block2 = BasicBlock(channels[1], channels[2], 2)
        self.bn1 = nn.BatchNorm2d(channels[2], momentum=0.001)
        self.relu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.fc = nn.Linear(channels[2], num_classes)
        self.channels = channels[2]
    def forward(self, x):
        out = self.conv1(x)
        out = self.block2(self.block1(out))
        out = self.relu(self.bn1(out))
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(-1, self.channels)
        return self.fc(out)
class ModelEMA(object):
    def __init__(self, model, decay):
        self.ema = copy.deepcopy(model)
        self.ema.eval()
        self.decay = decay
        self.ema_has_module = hasattr(self.ema, 'module')
        self.param_keys = [k for k, _ in self.ema.named_parameters()]
        self.buffer_keys = [k for k, _ in self.ema.named_buffers()]
        for p in self.ema.parameters():
            p.requires_grad_(False)
    def update(self, model):
        needs_module = hasattr(model, 'module') and not self.ema_has_module
        with torch.no_grad():
            msd = model.state_dict()
            esd = self.ema.state_dict()
            for k in self.param_keys:
                if needs_module:
                    j = 'module.' + k
                else:
                    j = k
                model_v = msd[j].detach()
                ema_v = esd[k]
                esd[k].copy_(ema_v * self.decay + (1. - self.decay) * model_v)
            for k in self.buffer_keys:
                if needs_module:
                    j = 'module.' + k
                else:
                    j = k
                esd[k].copy_(msd[j])
def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, num_cycles=7./16.,
                                    last_epoch=-1):
    def _lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        no_progress = float(current_step - num_warmup_steps) / \
            float(max(1, num_training_steps - num_warmup_steps))
        return max(0., math.cos(math.pi * num_cycles * no_progress))
    return LambdaLR(optimizer, _lr_lambda, last_epoch)
rng = np.random.default_rng(0)
images = torch.from_numpy(rng.uniform(0, 1, (20, 3, 8, 8)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 5, 20))
batch_size, mu, threshold, T, lambda_u = 4, 2, 0.3, 1.0, 1.0
aug = TransformFixMatch(rng)
labeled_dataset = SSLDataset(images[:6], labels[:6], lambda x: aug.weak(x))
unlabeled_dataset = SSLDataset(images[6:], labels[6:], aug)
labeled_trainloader = DataLoader(labeled_dataset, sampler=NumpyRandomSampler(labeled_dataset, 8, 1),
                                 batch_size=batch_size, drop_last=True)
unlabeled_trainloader = DataLoader(unlabeled_dataset, sampler=NumpyRandomSampler(unlabeled_dataset, 16, 2),
                                   batch_size=batch_size * mu, drop_last=True)
raw = WideResNet(num_classes=5)
sync(raw)
model = comp(raw, fullgraph=True)
no_decay = ['bias', 'bn']
grouped_parameters = [
    {'params': [p for n, p in raw.named_parameters() if not any(nd in n for nd in no_decay)], 'weight_decay': 5e-4},
    {'params': [p for n, p in raw.named_parameters() if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}]
optimizer = torch.optim.SGD(grouped_parameters, lr=0.03, momentum=0.9, nesterov=True)
scheduler = get_cosine_schedule_with_warmup(optimizer, 1, 3)
ema_model = ModelEMA(raw, 0.999)
ema_eval = comp(ema_model.ema, fullgraph=True)
LOSSES = []
labeled_iter, unlabeled_iter = iter(labeled_trainloader), iter(unlabeled_trainloader)
model.zero_grad()
for batch_idx in range(3):
    try:
        inputs_x, targets_x = next(labeled_iter)
    except StopIteration:
        labeled_iter = iter(labeled_trainloader)
        inputs_x, targets_x = next(labeled_iter)
    try:
        (inputs_u_w, inputs_u_s), _ = next(unlabeled_iter)
    except StopIteration:
        unlabeled_iter = iter(unlabeled_trainloader)
        (inputs_u_w, inputs_u_s), _ = next(unlabeled_iter)
    model.train()
    inputs = interleave(torch.cat((inputs_x, inputs_u_w, inputs_u_s)), 2 * mu + 1)
    logits = model(inputs)
    logits = de_interleave(logits, 2 * mu + 1)
    logits_x = logits[:batch_size]
    logits_u_w, logits_u_s = logits[batch_size:].chunk(2)
    del logits
    Lx = F.cross_entropy(logits_x, targets_x, reduction='mean')
    pseudo_label = torch.softmax(logits_u_w.detach() / T, dim=-1)
    max_probs, targets_u = torch.max(pseudo_label, dim=-1)
    mask = max_probs.ge(threshold).float()
    Lu = (F.cross_entropy(logits_u_s, targets_u, reduction='none') * mask).mean()
    loss = Lx + lambda_u * Lu
    loss.backward()
    optimizer.step()
    scheduler.step()
    ema_model.update(raw)
    model.zero_grad()
    LOSSES += [loss.item(), Lx.item(), Lu.item(), mask.mean().item(), scheduler.get_last_lr()[0]]
with torch.no_grad():
    outputs = ema_eval(images)
    LOSSES += [F.cross_entropy(outputs, labels).item(), (outputs.argmax(1) == labels).float().mean().item(),
               ema_model.ema.bn1.running_mean.sum().item()]
