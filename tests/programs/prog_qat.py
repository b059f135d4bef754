from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# Quantization-aware training written by hand (the DoReFa / LSQ repos' style): a custom
# autograd.Function rounds with a straight-through gradient, activations are fake-quantized
# with a min/max observer kept as EMA buffers, weights per output channel, and LSQ's
# learned step size gets its scaled gradient.
class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)
    @staticmethod
    def backward(ctx, g):
        return g

class ClampSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * ((x >= ctx.lo) & (x <= ctx.hi)).to(g.dtype), None, None

class ActQuant(nn.Module):
    def __init__(self, bits=8, momentum=0.1):
        super().__init__()
        self.bits, self.momentum = bits, momentum
        self.register_buffer("min_val", torch.tensor(0.0))
        self.register_buffer("max_val", torch.tensor(0.0))
        self.register_buffer("initialized", torch.tensor(False))
    def forward(self, x):
        if self.training:
            with torch.no_grad():
                lo, hi = x.min(), x.max()
                if not self.initialized:
                    self.min_val.copy_(lo); self.max_val.copy_(hi); self.initialized.fill_(True)
                else:
                    self.min_val.mul_(1 - self.momentum).add_(self.momentum * lo)
                    self.max_val.mul_(1 - self.momentum).add_(self.momentum * hi)
        qmax = 2 ** self.bits - 1
        scale = (self.max_val - self.min_val).clamp(min=1e-8) / qmax
        zp = torch.round(-self.min_val / scale)
        q = ClampSTE.apply(RoundSTE.apply(x / scale) + zp, 0, qmax)
        return (q - zp) * scale

class LSQWeight(nn.Module):
    def __init__(self, weight, bits=4):
        super().__init__()
        self.qp = 2 ** (bits - 1) - 1
        init = 2 * weight.detach().abs().flatten(1).mean(1) / self.qp ** 0.5
        self.step = nn.Parameter(init.view(-1, *([1] * (weight.dim() - 1))))
    def forward(self, w):
        g = 1.0 / (w[0].numel() * self.qp) ** 0.5
        s = self.step * g + (self.step - self.step * g).detach()    # LSQ's gradient scale
        return RoundSTE.apply(torch.clamp(w / s, -self.qp - 1, self.qp)) * s

class QConv(nn.Conv2d):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.wq = LSQWeight(self.weight)
        self.aq = ActQuant()
    def forward(self, x):
        return F.conv2d(self.aq(x), self.wq(self.weight), self.bias, self.stride, self.padding)

class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(QConv(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                                      QConv(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU6(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, 10)
    def forward(self, x):
        return self.fc(self.features(x))

model = QNet(); sync(model)
opt = torch.optim.SGD([{"params": [p for n, p in model.named_parameters() if not n.endswith("step")]},
                       {"params": [p for n, p in model.named_parameters() if n.endswith("step")], "lr": 1e-3}],
                      lr=0.05, momentum=0.9, nesterov=True)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(5):
    x = torch.from_numpy(rng.standard_normal((8, 3, 8, 8)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 8))
    model.train()
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES += [loss.item(), model.features[0].aq.max_val.item(), model.features[3].wq.step.sum().item()]
model.eval()
with torch.no_grad():
    out = net(x)
LOSSES += [out.sum().item(), model.features[3].aq.min_val.item()]
