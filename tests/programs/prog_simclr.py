from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
class Encoder(nn.Module):
    def __init__(self, out_dim=16):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
        dim_mlp = 16
        self.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), nn.Linear(dim_mlp, out_dim))
    def forward(self, x):
        return self.fc(self.backbone(x))
def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res
class SimCLR:
    def __init__(self, model, optimizer, scheduler, batch_size, n_views=2, temperature=0.07):
        self.model = model; self.optimizer = optimizer; self.scheduler = scheduler
        self.batch_size = batch_size; self.n_views = n_views; self.temperature = temperature
        self.criterion = torch.nn.CrossEntropyLoss().to(device)
    def info_nce_loss(self, features):
        labels = torch.cat([torch.arange(self.batch_size) for i in range(self.n_views)], dim=0)
        labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        labels = labels.to(device)
        features = F.normalize(features, dim=1)
        similarity_matrix = torch.matmul(features, features.T)
        mask = torch.eye(labels.shape[0], dtype=torch.bool).to(device)
        labels = labels[~mask].view(labels.shape[0], -1)
        similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
        positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)
        negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)
        logits = torch.cat([positives, negatives], dim=1)
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(device)
        logits = logits / self.temperature
        return logits, labels
def nt_xent(z1, z2, temperature=0.5):
    z = torch.cat([z1, z2], dim=0)
    z = F.normalize(z, p=2, dim=-1)
    sim = z @ z.t() / temperature
    sim.fill_diagonal_(float('-inf'))
    n = z1.size(0)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)
def cosine_variant(z1, z2, tau=0.2):
    sim = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / tau
    logits = torch.cat([sim, sim.t()], 0)
    eye = torch.eye(z1.size(0), dtype=torch.bool)
    off = sim.masked_fill(eye, float('-inf'))
    return F.cross_entropy(logits, torch.arange(z1.size(0)).repeat(2)) + 0.01 * torch.logsumexp(off, 1).mean()
model = Encoder().to(device); sync(model)
optimizer = torch.optim.Adam(model.parameters(), 3e-4, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10, eta_min=0, last_epoch=-1)
simclr = SimCLR(model, optimizer, scheduler, batch_size=6)
scaler = torch.cuda.amp.GradScaler(enabled=False)
r = np.random.default_rng(0)
fwd = comp(model)
LOSSES = []
for it in range(3):
    base = r.standard_normal((6, 3, 12, 12)).astype(np.float32)
    v1 = torch.from_numpy(base + 0.1 * r.standard_normal(base.shape).astype(np.float32))
    v2 = torch.flip(torch.from_numpy(base), dims=[3]) * 0.9
    images = torch.cat([v1, v2], dim=0).to(device)
    with torch.autocast(device_type="cpu", enabled=False):
        features = fwd(images)
        logits, labels = simclr.info_nce_loss(features)
        loss = simclr.criterion(logits, labels)
        loss = loss + nt_xent(features[:6], features[6:]) + cosine_variant(features[:6], features[6:])
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    top1, top5 = accuracy(logits, labels, topk=(1, 5))
    LOSSES += [loss.item(), top1[0].item(), top5[0].item()]
LOSSES.append(scheduler.get_last_lr()[0] * 1e4)
