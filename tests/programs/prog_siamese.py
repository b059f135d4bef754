from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class Emb(nn.Module):
    def __init__(s):
        super().__init__()
        s.f = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.PReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(8, 16, 3, groups=2), nn.Hardswish(), nn.AdaptiveMaxPool2d(2), nn.Flatten(), nn.Linear(64, 16))
    def forward(s, x): return F.normalize(s.f(x), p=2, dim=1)
net = Emb(); sync(net)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2, eta_min=1e-4)
tl = nn.TripletMarginLoss(margin=1.0, p=2); ce = nn.CosineEmbeddingLoss(margin=0.1); mr = nn.MarginRankingLoss(0.5)
r = np.random.default_rng(0); fwd = comp(net); LOSSES = []
for i in range(4):
    a, p, n = (torch.from_numpy(r.standard_normal((8, 1, 12, 12)).astype(np.float32)) for _ in range(3))
    ea, ep, en = fwd(a), fwd(p), fwd(n)
    y = torch.from_numpy(np.where(r.random(8) < 0.5, 1.0, -1.0).astype(np.float32))
    dp = F.pairwise_distance(ea, ep); dn = F.pairwise_distance(ea, en)
    loss = tl(ea, ep, en) + ce(ea, en, y) + mr(dn, dp, torch.ones(8)) + F.cosine_similarity(ea, ep).mean() + torch.cdist(ea, en).mean()
    loss = loss + F.triplet_margin_with_distance_loss(ea, ep, en, distance_function=lambda x, y: 1 - F.cosine_similarity(x, y), margin=0.3)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step(i + 0.5)
    LOSSES += [loss.item(), opt.param_groups[0]["lr"]]
