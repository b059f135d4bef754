from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
teacher = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d((4, 4)), nn.Flatten(), nn.Linear(128, 10))
student = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
sync(teacher, student)
T = 2.0; alpha = 0.7
opt = torch.optim.Adam(student.parameters(), lr=1e-3)
r = np.random.default_rng(0); teacher.eval(); fwd = comp(student)
LOSSES = []
for i in range(3):
    x = torch.from_numpy(r.standard_normal((16, 1, 14, 14)).astype(np.float32)); y = torch.from_numpy(r.integers(0, 10, 16))
    with torch.no_grad(): tl = teacher(x)
    sl = fwd(x)
    soft = nn.KLDivLoss(reduction="batchmean")(F.log_softmax(sl / T, dim=1), F.softmax(tl / T, dim=1)) * T * T
    loss = alpha * soft + (1 - alpha) * F.cross_entropy(sl, y)
    # SimCLR-style NT-Xent on two views
    z = F.normalize(torch.cat([sl, sl.flip(0)], 0), dim=1)
    sim = torch.matmul(z, z.T) / 0.5
    mask = torch.eye(32, dtype=torch.bool)
    sim = sim.masked_fill(mask, -9e15)
    labels = torch.cat([torch.arange(16, 32), torch.arange(0, 16)])
    loss = loss + 0.1 * F.cross_entropy(sim, labels)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
