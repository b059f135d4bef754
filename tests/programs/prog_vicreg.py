from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# VICReg (Bardes, Ponce, LeCun) as facebookresearch/vicreg's main_vicreg.py writes it: a
# small ResNet backbone and a BatchNorm projector built from an "a-b-c" spec string, the
# loss inside the model's forward (invariance MSE, a hinge on the standard deviation of
# each centred embedding, the squared off-diagonal covariance by the flatten()[:-1].view
# trick), its LARS optimizer (a torch.optim.Optimizer subclass: trust ratios by torch.where,
# momentum in the parameter state, biases and norms excluded by a predicate), the learning
# rate set by hand each step (linear warmup, cosine decay), two augmented views made in
# numpy (random crops, flips, colour scaling), compiled whole
def Projector(args, embedding):
    mlp_spec = f"{embedding}-{args['mlp']}"
    layers = []
    f = list(map(int, mlp_spec.split("-")))
    for i in range(len(f) - 2):
        layers.append(nn.Linear(f[i], f[i + 1]))
        layers.append(nn.BatchNorm1d(f[i + 1]))
        layers.append(nn.ReLU(True))
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)
def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()
class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)
class ResNetTiny(nn.Module):
    def __init__(self, widths=(8, 16, 32)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        blocks, c = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(c, w, 1 if i == 0 else 2)); c = w
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.num_features = c
    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layers(x)
        return torch.flatten(self.avgpool(x), 1)
class VICReg(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.num_features = int(args['mlp'].split("-")[-1])
        self.backbone = ResNetTiny()
        self.embedding = self.backbone.num_features
        self.projector = Projector(args, self.embedding)
    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))
        repr_loss = F.mse_loss(x, y)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)
        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
        cov_x = (x.T @ x) / (self.args['batch_size'] - 1)
        cov_y = (y.T @ y) / (self.args['batch_size'] - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(self.num_features) + \
            off_diagonal(cov_y).pow_(2).sum().div(self.num_features)
        loss = (self.args['sim_coeff'] * repr_loss + self.args['std_coeff'] * std_loss
                + self.args['cov_coeff'] * cov_loss)
        return loss
def exclude_bias_and_norm(p):
    return p.ndim == 1
class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=None, lars_adaptation_filter=None):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
                        weight_decay_filter=weight_decay_filter, lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)
    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad
                if dp is None:
                    continue
                if g['weight_decay_filter'] is None or not g['weight_decay_filter'](p):
                    dp = dp.add(p, alpha=g['weight_decay'])
                if g['lars_adaptation_filter'] is None or not g['lars_adaptation_filter'](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0, (g['eta'] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)
                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)
                p.add_(mu, alpha=-g['lr'])
def adjust_learning_rate(args, optimizer, loader_len, step):
    max_steps = args['epochs'] * loader_len
    warmup_steps = 2 * loader_len // 3
    base_lr = args['base_lr'] * args['batch_size'] / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr
def augment(rng, imgs, size=12):
    n, c, h, w = imgs.shape
    out = np.empty((n, c, size, size), np.float32)
    for i in range(n):
        top, left = rng.integers(0, h - size + 1), rng.integers(0, w - size + 1)
        v = imgs[i, :, top:top + size, left:left + size]
        if rng.random() < 0.5:
            v = v[:, :, ::-1]
        out[i] = v * rng.uniform(0.6, 1.4, (c, 1, 1)) + rng.uniform(-0.2, 0.2, (c, 1, 1))
    return out
args = dict(mlp="64-64-64", batch_size=16, sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0,
            base_lr=0.2, wd=1e-6, epochs=2)
rng = np.random.default_rng(0)
yy, xx = np.mgrid[:16, :16] / 16.0
data = np.stack([np.stack([np.sin(2 * np.pi * (f * xx + g * yy) + p) for p in rng.uniform(0, 6, 3)])
                 for f, g in rng.uniform(0.5, 3, (48, 2))]).astype(np.float32)
model = VICReg(args); sync(model)
net = comp(model)
optimizer = LARS(model.parameters(), lr=0, weight_decay=args['wd'], weight_decay_filter=exclude_bias_and_norm,
                 lars_adaptation_filter=exclude_bias_and_norm)
loader_len = len(data) // args['batch_size']
LOSSES = []
step = 0
for epoch in range(args['epochs']):
    order = rng.permutation(len(data))
    for i in range(loader_len):
        batch = data[order[i * args['batch_size']:(i + 1) * args['batch_size']]]
        x, y = torch.from_numpy(augment(rng, batch)), torch.from_numpy(augment(rng, batch))
        lr = adjust_learning_rate(args, optimizer, loader_len, step)
        optimizer.zero_grad()
        loss = net(x, y)
        loss.backward()
        optimizer.step()
        step += 1
        LOSSES += [loss.item(), lr]
model.eval()
with torch.no_grad():
    emb = model.backbone(torch.from_numpy(data[:8, :, 2:14, 2:14]))
    LOSSES += [emb.std(0).mean().item(), net(torch.from_numpy(augment(rng, data[:16])), torch.from_numpy(augment(rng, data[:16]))).item()]
