from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
def squash(s, dim=-1):
    squared_norm = (s ** 2).sum(dim=dim, keepdim=True)
    return squared_norm / (1 + squared_norm) * s / torch.sqrt(squared_norm + 1e-8)
class PrimaryCaps(nn.Module):
    def __init__(self, num_caps=4, in_channels=8, out_channels=4, kernel_size=3, stride=2):
        super().__init__()
        self.capsules = nn.ModuleList([nn.Conv2d(in_channels, out_channels, kernel_size, stride)
                                       for _ in range(num_caps)])
    def forward(self, x):
        u = torch.stack([capsule(x) for capsule in self.capsules], dim=1)   # (b, caps, c, h, w)
        u = u.view(x.size(0), len(self.capsules), -1).transpose(1, 2)       # (b, routes, caps)
        return squash(u)
class DigitCaps(nn.Module):
    """Routing-by-agreement (Sabour et al. 2017) with three iterations."""
    def __init__(self, num_routes=64, in_dim=4, num_caps=3, out_dim=6, iterations=3):
        super().__init__()
        self.num_routes, self.num_caps, self.iterations = num_routes, num_caps, iterations
        self.W = nn.Parameter(0.1 * torch.randn(1, num_routes, num_caps, out_dim, in_dim))
    def forward(self, x):                                     # (b, routes, in_dim)
        b = x.size(0)
        x = x.unsqueeze(2).unsqueeze(4)                       # (b, routes, 1, in_dim, 1)
        u_hat = torch.matmul(self.W, x).squeeze(-1)           # (b, routes, caps, out_dim)
        b_ij = torch.zeros(b, self.num_routes, self.num_caps, 1)
        for iteration in range(self.iterations):
            c_ij = F.softmax(b_ij, dim=2)
            s_j = (c_ij * u_hat).sum(dim=1, keepdim=True)
            v_j = squash(s_j)
            if iteration < self.iterations - 1:
                a_ij = (u_hat * v_j).sum(dim=-1, keepdim=True)
                b_ij = b_ij + a_ij
        return v_j.squeeze(1)                                  # (b, caps, out_dim)
class CapsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3)
        self.primary = PrimaryCaps()
        self.digits = DigitCaps()
        self.decoder = nn.Sequential(nn.Linear(18, 32), nn.ReLU(inplace=True),
                                     nn.Linear(32, 144), nn.Sigmoid())
    def forward(self, data):
        v = self.digits(self.primary(F.relu(self.conv1(data))))
        classes = torch.sqrt((v ** 2).sum(2))
        _, max_idx = classes.max(dim=1)
        masked = torch.eye(3).index_select(dim=0, index=max_idx)
        recon = self.decoder((v * masked[:, :, None]).view(data.size(0), -1))
        return classes, recon.view(-1, 1, 12, 12), masked
def margin_loss(classes, labels):
    left = F.relu(0.9 - classes).view(classes.size(0), -1) ** 2
    right = F.relu(classes - 0.1).view(classes.size(0), -1) ** 2
    return (labels * left + 0.5 * (1.0 - labels) * right).sum(dim=1).mean()
model = CapsNet(); sync(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
fwd = comp(model)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    data = torch.from_numpy(r.random((5, 1, 12, 12)).astype(np.float32))
    target = torch.from_numpy(r.integers(0, 3, 5))
    labels = F.one_hot(target, 3).float()
    classes, recon, masked = fwd(data)
    loss = margin_loss(classes, labels) + 0.0005 * F.mse_loss(recon, data, reduction='sum')
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss.item(), (masked.argmax(1) == target).sum().item()]
