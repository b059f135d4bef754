from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# PatchTST as its repository writes it, small: RevIN (per-instance mean / stdev over time,
# a learned affine, undone on the forecast), patching by Tensor.unfold(dimension=-1,
# size=patch_len, step=stride) after a ReplicationPad1d at the end, channel independence by
# reshaping (batch, channels) into one batch axis, a learned positional embedding, a
# pre-norm nn.TransformerEncoder (batch_first, norm_first=True, GELU), a flatten head,
# MSE; OneCycleLR stepped per batch; evaluated without grad on a held-out window
class RevIN(nn.Module):
    def __init__(self, num_features, eps=1e-5, affine=True):
        super().__init__()
        self.num_features, self.eps, self.affine = num_features, eps, affine
        if self.affine:
            self.affine_weight = nn.Parameter(torch.ones(self.num_features))
            self.affine_bias = nn.Parameter(torch.zeros(self.num_features))
    def forward(self, x, mode):
        if mode == "norm":
            self._get_statistics(x)
            x = self._normalize(x)
        elif mode == "denorm":
            x = self._denormalize(x)
        else:
            raise NotImplementedError
        return x
    def _get_statistics(self, x):
        dim2reduce = tuple(range(1, x.ndim - 1))
        self.mean = torch.mean(x, dim=dim2reduce, keepdim=True).detach()
        self.stdev = torch.sqrt(torch.var(x, dim=dim2reduce, keepdim=True, unbiased=False) + self.eps).detach()
    def _normalize(self, x):
        x = (x - self.mean) / self.stdev
        if self.affine:
            x = x * self.affine_weight + self.affine_bias
        return x
    def _denormalize(self, x):
        if self.affine:
            x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean
class FlattenHead(nn.Module):
    def __init__(self, nf, target_window, head_dropout=0.0):
        super().__init__()
        self.flatten = nn.Flatten(start_dim=-2)
        self.linear = nn.Linear(nf, target_window)
        self.dropout = nn.Dropout(head_dropout)
    def forward(self, x):                        # x: [bs, nvars, d_model, patch_num]
        return self.dropout(self.linear(self.flatten(x)))
class PatchTST(nn.Module):
    def __init__(self, c_in, context_window, target_window, patch_len=8, stride=4, d_model=32, n_heads=4,
                 e_layers=2, d_ff=64, dropout=0.0):
        super().__init__()
        self.revin_layer = RevIN(c_in)
        self.patch_len, self.stride = patch_len, stride
        patch_num = int((context_window - patch_len) / stride + 1) + 1
        self.padding_patch_layer = nn.ReplicationPad1d((0, stride))
        self.W_P = nn.Linear(patch_len, d_model)
        self.W_pos = nn.Parameter(torch.empty(patch_num, d_model).uniform_(-0.02, 0.02))
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, e_layers, enable_nested_tensor=False)
        self.head = FlattenHead(d_model * patch_num, target_window)
    def forward(self, x):                        # x: [bs, seq_len, nvars]
        x = self.revin_layer(x, "norm")
        x = x.permute(0, 2, 1)                   # [bs, nvars, seq_len]
        x = self.padding_patch_layer(x)
        x = x.unfold(dimension=-1, size=self.patch_len, step=self.stride)   # [bs, nvars, patch_num, patch_len]
        n_vars = x.shape[1]
        u = self.W_P(x)
        u = torch.reshape(u, (u.shape[0] * u.shape[1], u.shape[2], u.shape[3]))
        z = self.encoder(u + self.W_pos)
        z = torch.reshape(z, (-1, n_vars, z.shape[-2], z.shape[-1]))
        z = z.permute(0, 1, 3, 2)                # [bs, nvars, d_model, patch_num]
        z = self.head(z)                         # [bs, nvars, target_window]
        z = z.permute(0, 2, 1)
        return self.revin_layer(z, "denorm")
# three channels of noisy seasonal series with trends and different scales
r = np.random.default_rng(0)
T = np.arange(2000)
series = np.stack([10 + 3 * np.sin(2 * np.pi * T / 24) + 0.002 * T,
                   -5 + np.sin(2 * np.pi * T / 12) * np.cos(2 * np.pi * T / 50),
                   100 + 20 * np.sin(2 * np.pi * T / 36 + 1.0)], axis=1) + 0.3 * r.standard_normal((2000, 3))
series = torch.from_numpy(series.astype(np.float32))
L, H = 48, 16
def windows(starts):
    x = torch.stack([series[s:s + L] for s in starts])
    y = torch.stack([series[s + L:s + L + H] for s in starts])
    return x, y
model = PatchTST(c_in=3, context_window=L, target_window=H); sync(model)
fwd = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
steps = 24
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps, pct_start=0.3)
criterion = nn.MSELoss()
LOSSES = []
model.train()
for step in range(steps):
    x, y = windows(r.integers(0, 1500, size=16))
    pred = fwd(x)
    loss = criterion(pred, y)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    if step % 4 == 3:
        LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    x, y = windows(np.arange(1600, 1900, 30))
    pred = fwd(x)
    LOSSES += [criterion(pred, y).item(), (pred - y).abs().mean().item(), pred[:, :, 2].mean().item()]
LOSSES.append(sched.get_last_lr()[0])
