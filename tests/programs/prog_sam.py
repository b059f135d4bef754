from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Sharpness-Aware Minimization as the davda54/sam repository writes it: a SAM optimizer
# wrapping a base SGD (its param_groups shared with the base's, @torch.no_grad() steps,
# e(w) kept in self.state[p], the climb undone by p.data = old_p, adaptive ASAM's |w|
# scaling), a small WideResNet (pre-activation blocks, BatchNorm whose momentum is saved
# on the module and zeroed for the second pass by model.apply), the repository's smoothed
# cross entropy (one_hot by scatter), its step-wise lr schedule setting group["lr"], and a
# compiled model evaluated under no_grad each epoch
class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super(SAM, self).__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)
    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None: continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"
        if zero_grad: self.zero_grad()
    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None: continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"
        self.base_optimizer.step()  # do the actual "sharpness-aware" update
        if zero_grad: self.zero_grad()
    @torch.no_grad()
    def step(self, closure=None):
        assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
        closure = torch.enable_grad()(closure)
        self.first_step(zero_grad=True)
        closure()
        self.second_step()
    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device
        norm = torch.norm(
                    torch.stack([
                        ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
                        for group in self.param_groups for p in group["params"]
                        if p.grad is not None
                    ]),
                    p=2
               )
        return norm
def disable_running_stats(model):
    def _disable(module):
        if isinstance(module, nn.BatchNorm2d):
            module.backup_momentum = module.momentum
            module.momentum = 0
    model.apply(_disable)
def enable_running_stats(model):
    def _enable(module):
        if isinstance(module, nn.BatchNorm2d) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum
    model.apply(_enable)
def smooth_crossentropy(pred, gold, smoothing=0.1):
    n_class = pred.size(1)
    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    log_prob = F.log_softmax(pred, dim=1)
    return F.kl_div(input=log_prob, target=one_hot, reduction='none').sum(-1)
class BasicUnit(nn.Module):
    def __init__(self, channels, dropout):
        super(BasicUnit, self).__init__()
        self.block = nn.Sequential(
            nn.BatchNorm2d(channels), nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False))
    def forward(self, x):
        return x + self.block(x)
class DownsampleUnit(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super(DownsampleUnit, self).__init__()
        self.norm_act = nn.Sequential(nn.BatchNorm2d(in_channels), nn.ReLU(inplace=True))
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False))
        self.downsample = nn.Conv2d(in_channels, out_channels, 1, stride=stride, padding=0, bias=False)
    def forward(self, x):
        x = self.norm_act(x)
        return self.block(x) + self.downsample(x)
class WideResNet(nn.Module):
    def __init__(self, width_factor=2, dropout=0.0, in_channels=3, labels=5):
        super(WideResNet, self).__init__()
        filters = [4, 4 * width_factor, 8 * width_factor]
        self.f = nn.Sequential(
            nn.Conv2d(in_channels, filters[0], 3, stride=1, padding=1, bias=False),
            DownsampleUnit(filters[0], filters[1], 1), BasicUnit(filters[1], dropout),
            DownsampleUnit(filters[1], filters[2], 2), BasicUnit(filters[2], dropout),
            nn.BatchNorm2d(filters[2]), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(filters[2], labels))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight.data, mode="fan_in", nonlinearity="relu")
    def forward(self, x):
        return self.f(x)
class StepLR:
    def __init__(self, optimizer, learning_rate, total_epochs):
        self.optimizer, self.total_epochs, self.base = optimizer, total_epochs, learning_rate
    def __call__(self, epoch):
        if epoch < self.total_epochs * 3/10: lr = self.base
        elif epoch < self.total_epochs * 6/10: lr = self.base * 0.2
        else: lr = self.base * 0.2 ** 2
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
    def lr(self):
        return self.optimizer.param_groups[0]["lr"]
rng = np.random.default_rng(0)
images = torch.from_numpy(rng.standard_normal((24, 3, 8, 8)).astype(np.float32))
targets = torch.from_numpy(rng.integers(0, 5, 24))
raw = WideResNet()
sync(raw)
model = comp(raw, fullgraph=True)
LOSSES = []
base_optimizer = torch.optim.SGD
optimizer = SAM(raw.parameters(), base_optimizer, rho=0.05, adaptive=False, lr=0.1, momentum=0.9,
                weight_decay=5e-4)
scheduler = StepLR(optimizer, 0.1, 2)
for epoch in range(2):
    model.train()
    inputs, labels = images[12 * epoch:12 * epoch + 12], targets[12 * epoch:12 * epoch + 12]
    # first forward-backward step
    enable_running_stats(model)
    predictions = model(inputs)
    loss = smooth_crossentropy(predictions, labels, smoothing=0.1)
    loss.mean().backward()
    optimizer.first_step(zero_grad=True)
    # second forward-backward step
    disable_running_stats(model)
    smooth_crossentropy(model(inputs), labels, smoothing=0.1).mean().backward()
    optimizer.second_step(zero_grad=True)
    with torch.no_grad():
        correct = torch.argmax(predictions.data, 1) == labels
        LOSSES += [loss.mean().item(), correct.float().mean().item(), scheduler.lr()]
    scheduler(epoch + 1)
    model.eval()
    with torch.no_grad():
        LOSSES.append(smooth_crossentropy(model(images), targets).mean().item())
# adaptive SAM (ASAM) by the closure form of step
optimizer = SAM(raw.parameters(), base_optimizer, rho=2.0, adaptive=True, lr=0.05, momentum=0.9)
def closure():
    loss = smooth_crossentropy(model(images[:12]), targets[:12]).mean()
    loss.backward()
    return loss
model.train()
optimizer.zero_grad()
LOSSES.append(closure().item())
optimizer.step(closure)
LOSSES += [raw.f[-1].weight.sum().item(), raw.f[1].block[1].running_var.sum().item()]
