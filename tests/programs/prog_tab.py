from _harness import sync  # the runner: weights shared with the PyTorch run
import io, numpy as np, torch, torch.nn as nn
from torch.utils.data import TensorDataset, DataLoader
torch.manual_seed(0)
r = np.random.default_rng(0)
X = torch.tensor(r.standard_normal((200, 12)), dtype=torch.float32); y = torch.tensor(r.integers(0, 3, 200))
ds = TensorDataset(X, y)
perm = np.random.default_rng(42).permutation(200).tolist()
train, val = torch.utils.data.Subset(ds, perm[:160]), torch.utils.data.Subset(ds, perm[160:])
model = nn.Sequential(nn.Linear(12, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 3))
sync(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode='min', factor=0.5, patience=0)
LOSSES = []
for epoch in range(3):
    model.train(); tot = 0.0
    for xb, yb in DataLoader(train, batch_size=32, shuffle=False, drop_last=True):
        opt.zero_grad(); loss = nn.functional.cross_entropy(model(xb), yb); loss.backward(); opt.step(); tot += loss.item() * xb.size(0)
    model.eval(); correct = 0; vl = 0.0
    with torch.no_grad():
        for xb, yb in DataLoader(val, batch_size=16):
            out = model(xb); vl += nn.functional.cross_entropy(out, yb, reduction='sum').item()
            correct += (out.argmax(1) == yb).sum().item()
    sched.step(vl)
    LOSSES += [tot / 160, vl / 40, correct / len(val), opt.param_groups[0]['lr']]
buf = io.BytesIO(); torch.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'epoch': 3}, buf); buf.seek(0)
ck = torch.load(buf, weights_only=True); model.load_state_dict(ck['model']); opt.load_state_dict(ck['opt'])
LOSSES.append(ck['epoch'])
