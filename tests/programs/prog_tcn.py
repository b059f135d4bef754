from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm
torch.manual_seed(0)
class Chomp1d(nn.Module):
    def __init__(s, c): super().__init__(); s.c = c
    def forward(s, x): return x[:, :, :-s.c].contiguous()
class TemporalBlock(nn.Module):
    def __init__(s, i, o, k, stride, dilation, padding, dropout=0.0):
        super().__init__()
        s.conv1 = weight_norm(nn.Conv1d(i, o, k, stride=stride, padding=padding, dilation=dilation)); s.chomp1 = Chomp1d(padding); s.relu1 = nn.ReLU()
        s.conv2 = weight_norm(nn.Conv1d(o, o, k, stride=stride, padding=padding, dilation=dilation)); s.chomp2 = Chomp1d(padding); s.relu2 = nn.ReLU()
        s.net = nn.Sequential(s.conv1, s.chomp1, s.relu1, nn.Dropout(dropout), s.conv2, s.chomp2, s.relu2, nn.Dropout(dropout))
        s.downsample = nn.Conv1d(i, o, 1) if i != o else None; s.relu = nn.ReLU()
    def forward(s, x):
        out = s.net(x); res = x if s.downsample is None else s.downsample(x); return s.relu(out + res)
class TCN(nn.Module):
    def __init__(s, i, chans, k=2):
        super().__init__()
        layers = []
        for j, c in enumerate(chans):
            d = 2 ** j; layers += [TemporalBlock(i if j == 0 else chans[j - 1], c, k, 1, d, (k - 1) * d)]
        s.network = nn.Sequential(*layers); s.linear = nn.Linear(chans[-1], 3)
    def forward(s, x): return s.linear(s.network(x)[:, :, -1])
m = TCN(4, [8, 8, 8]); sync(m)
opt = torch.optim.Adam(m.parameters(), lr=2e-3); r = np.random.default_rng(0); fwd = comp(m); LOSSES = []
for i in range(3):
    x = torch.from_numpy(r.standard_normal((4, 4, 20)).astype(np.float32)); y = torch.from_numpy(r.integers(0, 3, 4))
    loss = nn.functional.cross_entropy(fwd(x), y); opt.zero_grad(); loss.backward(); opt.step(); LOSSES.append(loss.item())
