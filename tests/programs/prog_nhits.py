from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# N-HiTS as neuralforecast writes it: each block max-pools its input window at its own rate
# (MaxPool1d with ceil_mode), an MLP gives a backcast and a few forecast knots that
# F.interpolate stretches to the horizon (linear in two stacks, nearest in the last),
# doubly residual stacking from a naive level, windows scaled by a robust scaler (median
# and mean absolute deviation, masked by the available points), trained on the MAE over
# windows cut by unfold, batches drawn by numpy, the last one smaller (dynamic=True),
# StepLR, and a rolling evaluation under no_grad scored by sMAPE
class IdentityBasis(nn.Module):
    def __init__(self, backcast_size, forecast_size, interpolation_mode):
        super().__init__()
        self.backcast_size, self.forecast_size = backcast_size, forecast_size
        self.interpolation_mode = interpolation_mode
    def forward(self, theta):
        backcast = theta[:, :self.backcast_size]
        knots = theta[:, self.backcast_size:][:, None, :]
        if self.interpolation_mode == "nearest":
            forecast = F.interpolate(knots, size=self.forecast_size, mode="nearest")
        else:
            forecast = F.interpolate(knots, size=self.forecast_size, mode="linear", align_corners=False)
        return backcast, forecast[:, 0, :]
class NHITSBlock(nn.Module):
    def __init__(self, input_size, h, n_theta, pool_size, hidden, mode):
        super().__init__()
        self.pooling_layer = nn.MaxPool1d(kernel_size=pool_size, stride=pool_size, ceil_mode=True)
        pooled = int(np.ceil(input_size / pool_size))
        layers = [nn.Linear(pooled, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(hidden, input_size + n_theta))
        self.basis = IdentityBasis(input_size, h, mode)
    def forward(self, insample_y):
        x = self.pooling_layer(insample_y.unsqueeze(1)).squeeze(1)
        return self.basis(self.mlp(x))
class NHITS(nn.Module):
    def __init__(self, h=6, input_size=12, pools=(4, 2, 1), downsample=(3, 2, 1), hidden=24,
                 modes=("linear", "linear", "nearest")):
        super().__init__()
        self.h = h
        self.blocks = nn.ModuleList([NHITSBlock(input_size, h, max(h // d, 1), p, hidden, m)
                                     for p, d, m in zip(pools, downsample, modes)])
    def forward(self, insample_y, insample_mask):
        residuals = insample_y.flip(dims=(-1,))
        insample_mask = insample_mask.flip(dims=(-1,))
        forecast = insample_y[:, -1:].repeat(1, self.h)   # the naive level
        block_forecasts = [forecast]
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = (residuals - backcast) * insample_mask
            forecast = forecast + block_forecast
            block_forecasts.append(block_forecast)
        return forecast, torch.stack(block_forecasts, dim=-1)
class RobustScaler:
    def fit(self, x, mask):
        xm = torch.where(mask > 0, x, torch.nan)
        self.shift = xm.nanmedian(dim=1, keepdim=True).values
        mad = ((x - self.shift).abs() * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        self.scale = torch.where(mad == 0, torch.ones_like(mad), mad)
        return (x - self.shift) / self.scale * mask
    def inverse(self, z):
        return z * self.scale + self.shift
r = np.random.default_rng(0)
t = np.arange(200)
series = (10 + 3 * np.sin(2 * np.pi * t / 12) + 0.02 * t + 0.3 * r.standard_normal(200)).astype(np.float32)
series[r.integers(0, 120, 6)] = np.nan                       # missing points, masked
L, H = 12, 6
windows = torch.from_numpy(series[:150]).unfold(0, L + H, 1)   # (n, L + H)
model = NHITS(h=H, input_size=L); sync(model)
fwd = comp(model, dynamic=True)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
LOSSES = []
order = r.permutation(len(windows))
for step, start in enumerate(range(0, len(windows), 48)):
    batch = windows[torch.from_numpy(order[start:start + 48])]
    y, target = batch[:, :L], batch[:, L:]
    mask = (~torch.isnan(y)).float()
    tmask = (~torch.isnan(target)).float()
    scaler = RobustScaler()
    z = scaler.fit(torch.nan_to_num(y), mask)
    forecast, parts = fwd(z, mask)
    pred = scaler.inverse(forecast)
    loss = (torch.nan_to_num(target - pred).abs() * tmask).sum() / tmask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), parts[:, :, 1:].abs().mean().item()]
model.eval()
with torch.no_grad():
    test = torch.from_numpy(series[138:]).unfold(0, L + H, H)
    y, target = test[:, :L], test[:, L:]
    mask = torch.ones_like(y)
    scaler = RobustScaler()
    pred = scaler.inverse(fwd(scaler.fit(y, mask), mask)[0])
    smape = 200 * ((pred - target).abs() / (pred.abs() + target.abs())).mean()
    LOSSES += [smape.item()] + pred[0].tolist() + scaler.shift.flatten().tolist()
