from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# the Fourier neural operator (Li et al. 2021) as neuraloperator's fourier_2d.py writes it,
# scaled down: complex (cfloat) spectral weights mixing the lowest Fourier modes of
# rfft2, written into a zero spectrum by slices and back by irfft2, a grid appended as
# input channels, 1x1 Conv2d skips, GELU; Adam on the complex weights under StepLR and the
# relative L2 loss (LpLoss)
class SpectralConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1, modes2):
        super(SpectralConv2d, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.modes1 = modes1
        self.modes2 = modes2
        self.scale = (1 / (in_channels * out_channels))
        self.weights1 = nn.Parameter(self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat))
    def compl_mul2d(self, input, weights):
        return torch.einsum("bixy,ioxy->boxy", input, weights)
    def forward(self, x):
        batchsize = x.shape[0]
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat, device=x.device)
        out_ft[:, :, :self.modes1, :self.modes2] = self.compl_mul2d(x_ft[:, :, :self.modes1, :self.modes2], self.weights1)
        out_ft[:, :, -self.modes1:, :self.modes2] = self.compl_mul2d(x_ft[:, :, -self.modes1:, :self.modes2], self.weights2)
        x = torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))
        return x
class FNO2d(nn.Module):
    def __init__(self, modes1, modes2, width):
        super(FNO2d, self).__init__()
        self.modes1, self.modes2, self.width = modes1, modes2, width
        self.padding = 2
        self.fc0 = nn.Linear(3, self.width)
        self.conv0 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.conv1 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.w0 = nn.Conv2d(self.width, self.width, 1)
        self.w1 = nn.Conv2d(self.width, self.width, 1)
        self.fc1 = nn.Linear(self.width, 32)
        self.fc2 = nn.Linear(32, 1)
    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.fc0(x)
        x = x.permute(0, 3, 1, 2)
        x = F.pad(x, [0, self.padding, 0, self.padding])
        x1 = self.conv0(x)
        x2 = self.w0(x)
        x = x1 + x2
        x = F.gelu(x)
        x1 = self.conv1(x)
        x2 = self.w1(x)
        x = x1 + x2
        x = x[..., :-self.padding, :-self.padding]
        x = x.permute(0, 2, 3, 1)
        x = self.fc1(x)
        x = F.gelu(x)
        x = self.fc2(x)
        return x
    def get_grid(self, shape, device):
        batchsize, size_x, size_y = shape[0], shape[1], shape[2]
        gridx = torch.tensor(np.linspace(0, 1, size_x), dtype=torch.float)
        gridx = gridx.reshape(1, size_x, 1, 1).repeat([batchsize, 1, size_y, 1])
        gridy = torch.tensor(np.linspace(0, 1, size_y), dtype=torch.float)
        gridy = gridy.reshape(1, 1, size_y, 1).repeat([batchsize, size_x, 1, 1])
        return torch.cat((gridx, gridy), dim=-1).to(device)
class LpLoss(object):
    def __init__(self, d=2, p=2, size_average=True, reduction=True):
        super(LpLoss, self).__init__()
        self.d, self.p, self.reduction, self.size_average = d, p, reduction, size_average
    def rel(self, x, y):
        num_examples = x.size()[0]
        diff_norms = torch.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples, -1), self.p, 1)
        if self.reduction:
            if self.size_average:
                return torch.mean(diff_norms / y_norms)
            else:
                return torch.sum(diff_norms / y_norms)
        return diff_norms / y_norms
    def __call__(self, x, y):
        return self.rel(x, y)
model = FNO2d(4, 4, 8)
g = np.random.default_rng(1)
with torch.no_grad():   # the spectral weights drawn by numpy (torch.rand's stream is PyTorch's own)
    for conv in (model.conv0, model.conv1):
        for w in (conv.weights1, conv.weights2):
            w.copy_(torch.from_numpy((conv.scale * (g.random(w.shape) + 1j * g.random(w.shape))).astype(np.complex64)))
sync(model)
fwd = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
myloss = LpLoss(size_average=False)
r = np.random.default_rng(0)
s = 12
xs = np.linspace(0, 1, s)
LOSSES = []
for ep in range(4):
    a = r.standard_normal((4, 1, 1)) * np.sin(np.pi * xs)[None, :, None] * np.cos(np.pi * xs)[None, None, :]
    u = np.cumsum(a, axis=1) / s
    x = torch.from_numpy(a[..., None].astype(np.float32)); y = torch.from_numpy(u.astype(np.float32))
    model.train()
    optimizer.zero_grad()
    out = fwd(x).reshape(4, s, s)
    l2 = myloss(out.view(4, -1), y.view(4, -1))
    l2.backward()
    optimizer.step()
    scheduler.step()
    LOSSES.append(l2.item())
st = optimizer.state_dict()["state"]
assert st[2]["exp_avg"].dtype == torch.complex64   # conv0.weights1
LOSSES.append(st[2]["exp_avg_sq"].abs().sum().item())
