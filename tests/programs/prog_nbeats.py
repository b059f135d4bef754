from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# N-BEATS (Oreshkin et al.; the philipperemy/n-beats style): stacks of fully connected blocks,
# each emitting expansion coefficients theta that a basis turns into a backcast and a
# forecast; trend blocks use a polynomial basis and seasonality blocks a Fourier basis,
# both built in numpy from linspaces and multiplied in by thetas.mm(basis); generic blocks
# learn the basis. Doubly residual stacking in Python loops (backcast -= b, forecast += f),
# per-block forecasts kept for interpretability; a DataLoader over windows whose last batch
# is shorter (dynamic=True), sMAPE-style loss beside MSE, Adam under StepLR
def linear_space(backcast_length, forecast_length):
    ls = np.arange(-backcast_length, forecast_length, 1) / forecast_length
    return ls[:backcast_length], ls[backcast_length:]
def seasonality_model(thetas, t):
    p = thetas.size()[-1]
    p1, p2 = (p // 2, p // 2) if p % 2 == 0 else (p // 2, p // 2 + 1)
    s1 = torch.tensor(np.array([np.cos(2 * np.pi * i * t) for i in range(p1)])).float()
    s2 = torch.tensor(np.array([np.sin(2 * np.pi * i * t) for i in range(p2)])).float()
    S = torch.cat([s1, s2])
    return thetas.mm(S)
def trend_model(thetas, t):
    p = thetas.size()[-1]
    T = torch.tensor(np.array([t ** i for i in range(p)])).float()
    return thetas.mm(T)
class Block(nn.Module):
    def __init__(self, units, thetas_dim, backcast_length=20, forecast_length=5, share_thetas=False):
        super().__init__()
        self.units, self.thetas_dim = units, thetas_dim
        self.fc1 = nn.Linear(backcast_length, units)
        self.fc2 = nn.Linear(units, units)
        self.fc3 = nn.Linear(units, units)
        self.fc4 = nn.Linear(units, units)
        self.backcast_linspace, self.forecast_linspace = linear_space(backcast_length, forecast_length)
        if share_thetas:
            self.theta_f_fc = self.theta_b_fc = nn.Linear(units, thetas_dim, bias=False)
        else:
            self.theta_b_fc = nn.Linear(units, thetas_dim, bias=False)
            self.theta_f_fc = nn.Linear(units, thetas_dim, bias=False)
    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        return F.relu(self.fc4(x))
class SeasonalityBlock(Block):
    def __init__(self, units, thetas_dim, backcast_length, forecast_length):
        super().__init__(units, forecast_length, backcast_length, forecast_length, share_thetas=True)
    def forward(self, x):
        x = super().forward(x)
        backcast = seasonality_model(self.theta_b_fc(x), self.backcast_linspace)
        forecast = seasonality_model(self.theta_f_fc(x), self.forecast_linspace)
        return backcast, forecast
class TrendBlock(Block):
    def __init__(self, units, thetas_dim, backcast_length, forecast_length):
        super().__init__(units, thetas_dim, backcast_length, forecast_length, share_thetas=True)
    def forward(self, x):
        x = super().forward(x)
        backcast = trend_model(self.theta_b_fc(x), self.backcast_linspace)
        forecast = trend_model(self.theta_f_fc(x), self.forecast_linspace)
        return backcast, forecast
class GenericBlock(Block):
    def __init__(self, units, thetas_dim, backcast_length, forecast_length):
        super().__init__(units, thetas_dim, backcast_length, forecast_length)
        self.backcast_fc = nn.Linear(thetas_dim, backcast_length)
        self.forecast_fc = nn.Linear(thetas_dim, forecast_length)
    def forward(self, x):
        x = super().forward(x)
        theta_b, theta_f = self.theta_b_fc(x), self.theta_f_fc(x)
        return self.backcast_fc(theta_b), self.forecast_fc(theta_f)
class NBeatsNet(nn.Module):
    TREND_BLOCK, SEASONALITY_BLOCK, GENERIC_BLOCK = "trend", "seasonality", "generic"
    def __init__(self, stack_types=("trend", "seasonality", "generic"), nb_blocks_per_stack=2,
                 forecast_length=5, backcast_length=20, thetas_dim=(3, 8, 6), hidden_layer_units=32):
        super().__init__()
        self.forecast_length, self.backcast_length = forecast_length, backcast_length
        self.stacks, self.parameters_ = [], []
        blocks = {"trend": TrendBlock, "seasonality": SeasonalityBlock, "generic": GenericBlock}
        for stack_id, kind in enumerate(stack_types):
            stack = []
            for _ in range(nb_blocks_per_stack):
                b = blocks[kind](hidden_layer_units, thetas_dim[stack_id], backcast_length, forecast_length)
                self.parameters_.extend(b.parameters())
                stack.append(b)
            self.stacks.append(stack)
        self.parameters_ = nn.ParameterList(self.parameters_)
        self._intermediary_outputs = []
    def forward(self, backcast):
        self._intermediary_outputs = []
        forecast = torch.zeros(size=(backcast.size()[0], self.forecast_length))
        for stack_id in range(len(self.stacks)):
            for block_id in range(len(self.stacks[stack_id])):
                b, f = self.stacks[stack_id][block_id](backcast)
                backcast = backcast - b
                forecast = forecast + f
                self._intermediary_outputs.append(f)
        return backcast, forecast
def smape_loss(forecast, target):
    return 2 * torch.mean(torch.abs(forecast - target) / (torch.abs(forecast) + torch.abs(target) + 1e-2))
r = np.random.default_rng(0)
t = np.arange(600, dtype=np.float64)
series = (0.002 * t + np.sin(2 * np.pi * t / 25) + 0.3 * np.cos(2 * np.pi * t / 7) + 0.1 * r.standard_normal(600))
windows = np.lib.stride_tricks.sliding_window_view(series, 25)[::4].astype(np.float32)
x_all, y_all = torch.from_numpy(windows[:, :20].copy()), torch.from_numpy(windows[:, 20:].copy())
loader = DataLoader(TensorDataset(x_all[:100], y_all[:100]), batch_size=32, shuffle=False)
net = NBeatsNet(); sync(net)
fwd = comp(net, dynamic=True, fullgraph=True)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
LOSSES = []
for epoch in range(2):
    net.train()
    for xb, yb in loader:
        backcast, forecast = fwd(xb)
        loss = F.mse_loss(forecast, yb) + 0.1 * smape_loss(forecast, yb) + 0.01 * backcast.pow(2).mean()
        opt.zero_grad(); loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step(); sched.step()
        LOSSES.append(loss.item())
net.eval()
with torch.no_grad():
    _, forecast = fwd(x_all[100:])
    parts = torch.stack(net._intermediary_outputs)          # (blocks, batch, horizon)
    LOSSES += [F.mse_loss(forecast, y_all[100:]).item(), parts.abs().mean((1, 2))[0].item(),
               parts.sum(0).sub(forecast).abs().max().item()]
