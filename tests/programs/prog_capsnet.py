from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# CapsNet (Sabour et al. 2017) at toy size: primary capsules, routing by agreement,
# margin loss and a reconstruction decoder fed the true class's capsule only.
def squash(s, dim=-1):
    sq = (s ** 2).sum(dim=dim, keepdim=True)
    return sq / (1 + sq) * s / torch.sqrt(sq + 1e-8)

class PrimaryCaps(nn.Module):
    def __init__(self, in_ch=16, caps=4, dim=8):
        super().__init__()
        self.dim = dim
        self.conv = nn.Conv2d(in_ch, caps * dim, kernel_size=3, stride=2)
    def forward(self, x):
        u = self.conv(x)                                 # B, caps*dim, H, W
        B = u.size(0)
        u = u.view(B, -1, self.dim, u.size(-2), u.size(-1)).permute(0, 1, 3, 4, 2)
        return squash(u.contiguous().view(B, -1, self.dim))

class DigitCaps(nn.Module):
    def __init__(self, n_in, in_dim=8, n_out=5, out_dim=12, iters=3):
        super().__init__()
        self.iters = iters
        self.W = nn.Parameter(0.05 * torch.randn(1, n_in, n_out, out_dim, in_dim))
    def forward(self, u):
        u_hat = (self.W @ u[:, :, None, :, None]).squeeze(-1)      # B, n_in, n_out, out_dim
        b = torch.zeros(u_hat.shape[:3], device=u.device)
        u_detached = u_hat.detach()
        for i in range(self.iters):
            c = F.softmax(b, dim=2)
            if i == self.iters - 1:
                return squash((c.unsqueeze(-1) * u_hat).sum(dim=1))
            v = squash((c.unsqueeze(-1) * u_detached).sum(dim=1, keepdim=True))
            b = b + (u_detached * v).sum(-1)

class CapsNet(nn.Module):
    def __init__(self, n_cls=5):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.primary = PrimaryCaps()
        self.digits = DigitCaps(4 * 4 * 4, n_out=n_cls)
        self.decoder = nn.Sequential(nn.Linear(12 * n_cls, 64), nn.ReLU(inplace=True),
                                     nn.Linear(64, 14 * 14), nn.Sigmoid())
    def forward(self, x, y=None):
        v = self.digits(self.primary(F.relu(self.conv1(x))))
        lengths = v.norm(dim=-1)
        if y is None:
            y = lengths.argmax(dim=1)
        mask = F.one_hot(y, num_classes=v.size(1)).to(v.dtype)
        recon = self.decoder((v * mask[:, :, None]).flatten(1))
        return lengths, recon.view(-1, 1, 14, 14)

def margin_loss(lengths, y, m_pos=0.9, m_neg=0.1, lam=0.5):
    t = torch.eye(lengths.size(1))[y]
    loss = t * F.relu(m_pos - lengths) ** 2 + lam * (1 - t) * F.relu(lengths - m_neg) ** 2
    return loss.sum(dim=1).mean()

model = CapsNet(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(4):
    x = torch.from_numpy(rng.random((8, 1, 14, 14)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 5, 8))
    model.train()
    lengths, recon = net(x, y)
    loss = margin_loss(lengths, y) + 0.0005 * F.mse_loss(recon, x, reduction="sum") / x.size(0)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    lengths, recon = net(x)
    acc = (lengths.argmax(1) == y).float().mean()
LOSSES += [lengths.sum().item(), recon.mean().item(), acc.item()]
