from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm
torch.manual_seed(0)
# A temporal convolutional forecaster (Bai et al.'s TCN as darts and pytorch-forecasting
# build it): causal dilated Conv1d by left F.pad, weights under
# torch.nn.utils.parametrizations.weight_norm (original0/original1 in the state_dict),
# residual 1x1 downsampling; windows cut from a series by Tensor.unfold, a RevIN-style
# instance normalization, quantile (pinball) loss over three quantiles; Adam under
# ReduceLROnPlateau; eval under parametrize.cached(), the weight norm then removed by
# remove_parametrizations (leave_parametrized) and the plain network compared
QUANTILES = (0.1, 0.5, 0.9)
IN_LEN, OUT_LEN = 16, 4
class TemporalBlock(nn.Module):
    def __init__(self, c_in, c_out, kernel_size, dilation):
        super().__init__()
        self.pad = (kernel_size - 1) * dilation
        self.conv1 = weight_norm(nn.Conv1d(c_in, c_out, kernel_size, dilation=dilation))
        self.conv2 = weight_norm(nn.Conv1d(c_out, c_out, kernel_size, dilation=dilation))
        self.downsample = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None
        self.dropout = nn.Dropout(0.0)
    def forward(self, x):
        out = self.dropout(F.relu(self.conv1(F.pad(x, (self.pad, 0)))))
        out = self.dropout(F.relu(self.conv2(F.pad(out, (self.pad, 0)))))
        res = x if self.downsample is None else self.downsample(x)
        return F.relu(out + res)
class TCNForecaster(nn.Module):
    def __init__(self, channels=(8, 8, 8), kernel_size=3):
        super().__init__()
        layers, c_in = [], 2                               # the series and a time feature
        for i, c in enumerate(channels):
            layers.append(TemporalBlock(c_in, c, kernel_size, dilation=2 ** i))
            c_in = c
        self.network = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, OUT_LEN * len(QUANTILES))
    def forward(self, x, t):                               # (B, IN_LEN), (B, IN_LEN)
        mean = x.mean(1, keepdim=True).detach()
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5).detach()
        z = (x - mean) / std
        h = self.network(torch.stack([z, t], dim=1))       # (B, C, IN_LEN)
        q = self.head(h[:, :, -1]).view(-1, OUT_LEN, len(QUANTILES))
        return q * std[..., None] + mean[..., None]
def quantile_loss(pred, target):
    losses = []
    for i, q in enumerate(QUANTILES):
        errors = target - pred[..., i]
        losses.append(torch.max((q - 1) * errors, q * errors).unsqueeze(-1))
    return torch.cat(losses, dim=-1).sum(-1).mean()
r = np.random.default_rng(0)
steps = np.arange(300)
series = torch.from_numpy((np.sin(2 * np.pi * steps / 24) + 0.3 * np.sin(2 * np.pi * steps / 7)
                           + 0.01 * steps + 0.1 * r.standard_normal(300)).astype(np.float32))
tfeat = torch.from_numpy((steps % 24 / 24.0).astype(np.float32))
windows = series.unfold(0, IN_LEN + OUT_LEN, 5)            # (n, IN_LEN + OUT_LEN), stride 5
twin = tfeat.unfold(0, IN_LEN + OUT_LEN, 5)
model = TCNForecaster()
sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
LOSSES = []
for step in range(4):
    idx = torch.from_numpy(r.choice(len(windows) - 8, 8, replace=False))
    w, tw = windows[idx], twin[idx]
    pred = net(w[:, :IN_LEN], tw[:, :IN_LEN])
    loss = quantile_loss(pred, w[:, IN_LEN:])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step(loss.item() if step != 2 else 10.0)
    LOSSES += [loss.item(), optimizer.param_groups[0]["lr"]]
model.eval()
with torch.no_grad(), parametrize.cached():
    w, tw = windows[-8:], twin[-8:]
    pred = net(w[:, :IN_LEN], tw[:, :IN_LEN])
    LOSSES += [quantile_loss(pred, w[:, IN_LEN:]).item()] + pred[0].flatten().tolist()
    coverage = ((w[:, IN_LEN:] >= pred[..., 0]) & (w[:, IN_LEN:] <= pred[..., 2])).float().mean()
    LOSSES.append(coverage.item())
for block in model.network:
    parametrize.remove_parametrizations(block.conv1, "weight", leave_parametrized=True)
    parametrize.remove_parametrizations(block.conv2, "weight", leave_parametrized=True)
with torch.no_grad():
    plain = net(w[:, :IN_LEN], tw[:, :IN_LEN])
    LOSSES += [(plain - pred).abs().max().item() < 1e-5] + plain[-1].flatten().tolist()
    LOSSES.append(sorted(n for n, _ in model.named_parameters())[0] == "head.bias")
