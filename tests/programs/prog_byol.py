from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# BYOL as byol-pytorch and the paper's pseudo-code write it: an online network (encoder,
# projector, predictor) and a target network (encoder, projector) kept as an exponential
# moving average of it under no_grad (mul_ / add_ with alpha, BatchNorm buffers by lerp_),
# the target's momentum raised by a cosine schedule, two augmented views made by tensor ops
# (a random crop of a reflect-padded batch, a horizontal flip by torch.where on a mask, a
# brightness/contrast jitter), the symmetric normalized MSE 2 - 2 cos(p, z.detach())
def MLP(dim, projection_size, hidden_size=32):
    return nn.Sequential(nn.Linear(dim, hidden_size, bias=False), nn.BatchNorm1d(hidden_size), nn.ReLU(inplace=True),
                         nn.Linear(hidden_size, projection_size))
class NetWrapper(nn.Module):   # encoder + projector: what the target network copies
    def __init__(self, projection_size=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                 nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.projector = MLP(16, projection_size)
    def forward(self, x, return_projection=True):
        representation = self.net(x)
        if not return_projection:
            return representation
        return self.projector(representation), representation
def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)
class BYOL(nn.Module):
    def __init__(self, projection_size=16, moving_average_decay=0.99):
        super().__init__()
        self.online_encoder = NetWrapper(projection_size)
        self.online_predictor = MLP(projection_size, projection_size)
        self.target_encoder = copy.deepcopy(self.online_encoder)
        for p in self.target_encoder.parameters():
            p.requires_grad = False
        self.beta = moving_average_decay
    def forward(self, image_one, image_two):
        online_proj_one, _ = self.online_encoder(image_one)
        online_proj_two, _ = self.online_encoder(image_two)
        online_pred_one = self.online_predictor(online_proj_one)
        online_pred_two = self.online_predictor(online_proj_two)
        with torch.no_grad():
            target_proj_one, _ = self.target_encoder(image_one)
            target_proj_two, _ = self.target_encoder(image_two)
            target_proj_one.detach_()
            target_proj_two.detach_()
        loss_one = loss_fn(online_pred_one, target_proj_two.detach())
        loss_two = loss_fn(online_pred_two, target_proj_one.detach())
        return (loss_one + loss_two).mean()
    @torch.no_grad()
    def update_moving_average(self, beta):
        for online, target in zip(self.online_encoder.parameters(), self.target_encoder.parameters()):
            target.mul_(beta).add_(online, alpha=1 - beta)
        for online, target in zip(self.online_encoder.buffers(), self.target_encoder.buffers()):
            if target.dtype.is_floating_point:
                target.lerp_(online, 1 - beta)
            else:
                target.copy_(online)
def augment(x, r):
    """Two views' worth of augmentation with numpy's draws (crop offsets, flips, jitter)."""
    n = x.size(0)
    i, j = (int(v) for v in r.integers(0, 5, 2))
    x = F.pad(x, (2, 2, 2, 2), mode="reflect")[:, :, i:i + 12, j:j + 12]
    flip = torch.from_numpy(r.random(n) < 0.5).view(-1, 1, 1, 1)
    x = torch.where(flip, x.flip(-1), x)
    brightness = torch.from_numpy(r.uniform(0.8, 1.2, (n, 1, 1, 1)).astype(np.float32))
    contrast = torch.from_numpy(r.uniform(0.8, 1.2, (n, 1, 1, 1)).astype(np.float32))
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return ((x * brightness - mean) * contrast + mean).clamp(0, 1)
r = np.random.default_rng(0)
images = torch.tensor(r.random((48, 3, 12, 12)), dtype=torch.get_default_dtype())
loader = DataLoader(TensorDataset(images), batch_size=16, shuffle=False, drop_last=True)
learner = BYOL(); sync(learner)
model = comp(learner)
opt = torch.optim.SGD([p for p in learner.parameters() if p.requires_grad], lr=0.02, momentum=0.9, weight_decay=1e-4)
total_steps, k, base_beta = 6, 0, learner.beta
LOSSES = []
for epoch in range(2):
    for (x,) in loader:
        loss = model(augment(x, r), augment(x, r))
        opt.zero_grad()
        loss.backward()
        opt.step()
        beta = 1 - (1 - base_beta) * (math.cos(math.pi * k / total_steps) + 1) / 2
        learner.update_moving_average(beta); k += 1
        LOSSES.append(loss.item())
learner.eval()
with torch.no_grad():
    emb = learner.online_encoder(images[:8], return_projection=False)
LOSSES += [emb.sum().item(), sum(p.sum() for p in learner.target_encoder.parameters()).item(),
           learner.target_encoder.net[1].running_var.sum().item()]
