from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# TimesNet (Wu et al.; Time-Series-Library's TimesBlock) forecasting a multivariate series:
# period detection by torch.fft.rfft (amplitudes averaged over batch and channels, the DC
# term zeroed, topk frequencies read back to numpy as Python periods), each period's 1-D
# sequence zero-padded to a multiple of it and folded into a 2-D (cycles x period) map,
# an Inception block of parallel Conv2d kernels (averaged by stack/mean) with GELU, the
# maps unfolded and truncated, and aggregated by a softmax over the periods' amplitudes;
# a non-stationary normalization (mean and std over time, detached), a linear "predict"
# layer extending the time axis, a token Conv1d embedding with circular padding, Adam with
# a cosine annealing schedule, and the model compiled with its periods as Python ints
# (each new set of periods a new graph, as torch.compile's)
def FFT_for_Period(x, k=2):
    xf = torch.fft.rfft(x, dim=1)
    frequency_list = abs(xf).mean(0).mean(-1)
    frequency_list[0] = 0
    _, top_list = torch.topk(frequency_list, k)
    top_list = top_list.detach().cpu().numpy()
    period = x.shape[1] // top_list
    return period, abs(xf).mean(-1)[:, top_list]
class Inception_Block_V1(nn.Module):
    def __init__(self, in_channels, out_channels, num_kernels=3):
        super().__init__()
        self.kernels = nn.ModuleList([nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i)
                                      for i in range(num_kernels)])
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                nn.init.constant_(m.bias, 0)
    def forward(self, x):
        return torch.stack([k(x) for k in self.kernels], dim=-1).mean(-1)
class TimesBlock(nn.Module):
    def __init__(self, seq_len, pred_len, d_model, d_ff, top_k=2):
        super().__init__()
        self.seq_len, self.pred_len, self.k = seq_len, pred_len, top_k
        self.conv = nn.Sequential(Inception_Block_V1(d_model, d_ff), nn.GELU(), Inception_Block_V1(d_ff, d_model))
    def forward(self, x):
        B, T, N = x.size()
        period_list, period_weight = FFT_for_Period(x, self.k)
        res = []
        for i in range(self.k):
            period = period_list[i]
            if (self.seq_len + self.pred_len) % period != 0:
                length = (((self.seq_len + self.pred_len) // period) + 1) * period
                padding = torch.zeros([x.shape[0], (length - (self.seq_len + self.pred_len)), x.shape[2]]).to(x.device)
                out = torch.cat([x, padding], dim=1)
            else:
                length = self.seq_len + self.pred_len
                out = x
            out = out.reshape(B, length // period, period, N).permute(0, 3, 1, 2).contiguous()
            out = self.conv(out)
            out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
            res.append(out[:, :(self.seq_len + self.pred_len), :])
        res = torch.stack(res, dim=-1)
        period_weight = F.softmax(period_weight, dim=1)
        period_weight = period_weight.unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)
        return torch.sum(res * period_weight, -1) + x
class TimesNet(nn.Module):
    def __init__(self, enc_in, seq_len, pred_len, d_model=16, d_ff=16, e_layers=2):
        super().__init__()
        self.seq_len, self.pred_len = seq_len, pred_len
        self.token = nn.Conv1d(enc_in, d_model, 3, padding=1, padding_mode='circular', bias=False)
        self.model = nn.ModuleList([TimesBlock(seq_len, pred_len, d_model, d_ff) for _ in range(e_layers)])
        self.layer_norm = nn.LayerNorm(d_model)
        self.predict_linear = nn.Linear(seq_len, pred_len + seq_len)
        self.projection = nn.Linear(d_model, enc_in)
    def forward(self, x_enc):
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc - means
        stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc / stdev
        enc_out = self.token(x_enc.permute(0, 2, 1)).transpose(1, 2)
        enc_out = self.predict_linear(enc_out.permute(0, 2, 1)).permute(0, 2, 1)
        for layer in self.model:
            enc_out = self.layer_norm(layer(enc_out))
        dec_out = self.projection(enc_out)
        dec_out = dec_out * stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
        dec_out = dec_out + means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1)
        return dec_out[:, -self.pred_len:, :]
rng = np.random.default_rng(0)
SEQ, PRED, C = 24, 8, 3
t = np.arange(400)
series = np.stack([np.sin(2 * np.pi * t / 8), np.sin(2 * np.pi * t / 6) + 0.5 * np.cos(2 * np.pi * t / 12),
                   0.01 * t + np.sin(2 * np.pi * t / 8)], 1) + 0.1 * rng.standard_normal((400, C))
series = torch.from_numpy(series.astype(np.float32))
model = TimesNet(C, SEQ, PRED); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
LOSSES = []
model.train()
for step in range(6):
    starts = rng.integers(0, 300, 16)
    x = torch.stack([series[s:s + SEQ] for s in starts])
    y = torch.stack([series[s + SEQ:s + SEQ + PRED] for s in starts])
    loss = F.mse_loss(net(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    x = torch.stack([series[s:s + SEQ] for s in range(300, 364, 8)])
    y = torch.stack([series[s + SEQ:s + SEQ + PRED] for s in range(300, 364, 8)])
    pred = net(x)
    LOSSES += [F.mse_loss(pred, y).item(), F.l1_loss(pred, y).item()]
