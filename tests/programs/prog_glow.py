from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# Glow (Kingma & Dhariwal 2018) at toy size, rosinality's glow-pytorch structure: squeeze,
# ActNorm initialised from the first batch, an invertible 1x1 convolution in LU form
# (torch.linalg.lu of a random rotation, its diagonal's log as the parameter), affine
# coupling with a zero-initialised last conv, the bits-per-dim objective.
logabs = lambda x: torch.log(torch.abs(x))

class ActNorm(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, ch, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, ch, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
    def initialize(self, x):
        with torch.no_grad():
            flat = x.permute(1, 0, 2, 3).contiguous().view(x.shape[1], -1)
            mean = flat.mean(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            std = flat.std(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))
    def forward(self, x):
        _, _, h, w = x.shape
        if self.initialized.item() == 0:
            self.initialize(x)
            self.initialized.fill_(1)
        logdet = h * w * torch.sum(logabs(self.scale))
        return self.scale * (x + self.loc), logdet

class InvConv2dLU(nn.Module):
    def __init__(self, ch):
        super().__init__()
        weight = torch.from_numpy(np.linalg.qr(np.random.default_rng(1).standard_normal((ch, ch)))[0].astype(np.float32))
        w_p, w_l, w_u = torch.linalg.lu(weight)
        w_s = torch.diag(w_u)
        w_u = torch.triu(w_u, 1)
        u_mask = torch.triu(torch.ones_like(w_u), 1)
        self.register_buffer("w_p", w_p)
        self.register_buffer("u_mask", u_mask)
        self.register_buffer("l_mask", u_mask.T)
        self.register_buffer("s_sign", torch.sign(w_s))
        self.register_buffer("l_eye", torch.eye(u_mask.shape[0]))
        self.w_l = nn.Parameter(w_l)
        self.w_s = nn.Parameter(logabs(w_s))
        self.w_u = nn.Parameter(w_u)
    def calc_weight(self):
        weight = self.w_p @ (self.w_l * self.l_mask + self.l_eye) @ (
            (self.w_u * self.u_mask) + torch.diag(self.s_sign * torch.exp(self.w_s)))
        return weight.unsqueeze(2).unsqueeze(3)
    def forward(self, x):
        _, _, h, w = x.shape
        return F.conv2d(x, self.calc_weight()), h * w * torch.sum(self.w_s)

class ZeroConv2d(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.conv = nn.Conv2d(i, o, 3, padding=0)
        self.conv.weight.data.zero_(); self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, o, 1, 1))
    def forward(self, x):
        return self.conv(F.pad(x, [1, 1, 1, 1], value=1)) * torch.exp(self.scale * 3)

class AffineCoupling(nn.Module):
    def __init__(self, ch, filt=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(ch // 2, filt, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(filt, filt, 1), nn.ReLU(inplace=True), ZeroConv2d(filt, ch))
        self.net[0].weight.data.normal_(0, 0.05); self.net[0].bias.data.zero_()
    def forward(self, x):
        in_a, in_b = x.chunk(2, 1)
        log_s, t = self.net(in_a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        out_b = (in_b + t) * s
        logdet = torch.sum(torch.log(s).view(x.shape[0], -1), 1)
        return torch.cat([in_a, out_b], 1), logdet

class Glow(nn.Module):
    def __init__(self, ch=3, n_flow=3):
        super().__init__()
        sq = ch * 4
        self.flows = nn.ModuleList([m for _ in range(n_flow) for m in (ActNorm(sq), InvConv2dLU(sq), AffineCoupling(sq))])
    def forward(self, x):
        b, c, h, w = x.shape
        x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4).contiguous().view(b, c * 4, h // 2, w // 2)
        logdet = 0
        for flow in self.flows:
            x, det = flow(x)
            logdet = logdet + det
        log_p = (-0.5 * math.log(2 * math.pi) - 0.5 * x ** 2).view(b, -1).sum(1)
        return log_p, logdet, x

def calc_loss(log_p, logdet, image_size, n_bins=32):
    n_pixel = image_size * image_size * 3
    loss = -math.log(n_bins) * n_pixel + logdet + log_p
    return (-loss / (math.log(2) * n_pixel)).mean()

model = Glow(); sync(model)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(5):
    img = torch.from_numpy(rng.random((8, 3, 8, 8)).astype(np.float32)) - 0.5
    x = torch.floor(img * 32) / 32 + torch.from_numpy(rng.random(img.shape).astype(np.float32)) / 32
    log_p, logdet, _ = net(x)
    loss = calc_loss(log_p, logdet.mean(), 8)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES += [loss.item(), logdet.mean().item()]
with torch.no_grad():
    LOSSES.append(net(x)[2].std().item())
