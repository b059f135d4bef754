from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# a Kolmogorov-Arnold network as efficient-kan writes it: each KANLinear keeps a knot grid
# buffer per input, evaluates B-spline bases by the Cox-de Boor recursion (comparisons
# cast to the input's dtype, a Python loop over the spline order), sums bases times
# coefficients by einsum beside a SiLU base branch, and fits coefficients by
# torch.linalg.lstsq (curve2coeff). Trained on a symbolic-regression target with an L1 +
# entropy regularization; midway the grids adapt to the data under no_grad (torch.sort,
# linspace index, a quantile-like blend with a uniform grid) and the splines are refit
class KANLinear(nn.Module):
    def __init__(self, in_features, out_features, grid_size=5, spline_order=3, scale_noise=0.1,
                 scale_base=1.0, scale_spline=1.0, base_activation=nn.SiLU, grid_eps=0.02, grid_range=(-1, 1)):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.grid_size, self.spline_order = grid_size, spline_order
        h = (grid_range[1] - grid_range[0]) / grid_size
        grid = ((torch.arange(-spline_order, grid_size + spline_order + 1) * h + grid_range[0])
                .expand(in_features, -1).contiguous())
        self.register_buffer("grid", grid)
        self.base_weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.spline_weight = nn.Parameter(torch.Tensor(out_features, in_features, grid_size + spline_order))
        self.spline_scaler = nn.Parameter(torch.Tensor(out_features, in_features))
        self.scale_noise, self.scale_base, self.scale_spline = scale_noise, scale_base, scale_spline
        self.base_activation = base_activation()
        self.grid_eps = grid_eps
        self.reset_parameters()
    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5) * self.scale_base)
        with torch.no_grad():
            noise = ((torch.rand(self.grid_size + 1, self.in_features, self.out_features) - 1 / 2)
                     * self.scale_noise / self.grid_size)
            self.spline_weight.data.copy_(self.curve2coeff(self.grid.T[self.spline_order:-self.spline_order], noise))
            nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5) * self.scale_spline)
    def b_splines(self, x):
        assert x.dim() == 2 and x.size(1) == self.in_features
        grid = self.grid                         # (in_features, grid_size + 2 * spline_order + 1)
        x = x.unsqueeze(-1)
        bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
        for k in range(1, self.spline_order + 1):
            bases = ((x - grid[:, : -(k + 1)]) / (grid[:, k:-1] - grid[:, : -(k + 1)]) * bases[:, :, :-1]) + \
                    ((grid[:, k + 1:] - x) / (grid[:, k + 1:] - grid[:, 1:(-k)]) * bases[:, :, 1:])
        assert bases.size() == (x.size(0), self.in_features, self.grid_size + self.spline_order)
        return bases.contiguous()
    def curve2coeff(self, x, y):
        A = self.b_splines(x).transpose(0, 1)   # (in_features, batch_size, grid_size + spline_order)
        B = y.transpose(0, 1)                   # (in_features, batch_size, out_features)
        solution = torch.linalg.lstsq(A, B).solution
        return solution.permute(2, 0, 1).contiguous()
    @property
    def scaled_spline_weight(self):
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)
    def forward(self, x):
        original_shape = x.shape
        x = x.reshape(-1, self.in_features)
        base_output = F.linear(self.base_activation(x), self.base_weight)
        spline_output = torch.einsum("bik,oik->bo", self.b_splines(x), self.scaled_spline_weight)
        return (base_output + spline_output).reshape(*original_shape[:-1], self.out_features)
    @torch.no_grad()
    def update_grid(self, x, margin=0.01):
        batch = x.size(0)
        splines = self.b_splines(x).permute(1, 0, 2)              # (in, batch, coeff)
        orig_coeff = self.scaled_spline_weight.permute(1, 2, 0)    # (in, coeff, out)
        unreduced_spline_output = torch.bmm(splines, orig_coeff).permute(1, 0, 2)   # (batch, in, out)
        x_sorted = torch.sort(x, dim=0)[0]
        grid_adaptive = x_sorted[torch.linspace(0, batch - 1, self.grid_size + 1, dtype=torch.int64)]
        uniform_step = (x_sorted[-1] - x_sorted[0] + 2 * margin) / self.grid_size
        grid_uniform = (torch.arange(self.grid_size + 1, dtype=torch.float32).unsqueeze(1) * uniform_step
                        + x_sorted[0] - margin)
        grid = self.grid_eps * grid_uniform + (1 - self.grid_eps) * grid_adaptive
        grid = torch.concatenate([
            grid[:1] - uniform_step * torch.arange(self.spline_order, 0, -1).unsqueeze(1),
            grid,
            grid[-1:] + uniform_step * torch.arange(1, self.spline_order + 1).unsqueeze(1)], dim=0)
        self.grid.copy_(grid.T)
        self.spline_weight.data.copy_(self.curve2coeff(x, unreduced_spline_output))
    def regularization_loss(self, regularize_activation=1.0, regularize_entropy=1.0):
        l1_fake = self.spline_weight.abs().mean(-1)
        regularization_loss_activation = l1_fake.sum()
        p = l1_fake / regularization_loss_activation
        regularization_loss_entropy = -torch.sum(p * p.log())
        return regularize_activation * regularization_loss_activation + regularize_entropy * regularization_loss_entropy
class KAN(nn.Module):
    def __init__(self, layers_hidden, grid_size=5, spline_order=3):
        super().__init__()
        self.layers = nn.ModuleList([KANLinear(i, o, grid_size=grid_size, spline_order=spline_order)
                                     for i, o in zip(layers_hidden, layers_hidden[1:])])
    def forward(self, x, update_grid=False):
        for layer in self.layers:
            if update_grid:
                layer.update_grid(x)
            x = layer(x)
        return x
    def regularization_loss(self, regularize_activation=1.0, regularize_entropy=1.0):
        return sum(layer.regularization_loss(regularize_activation, regularize_entropy) for layer in self.layers)
def target_fn(x):   # f(x, y) = exp(sin(pi x) + y^2), pykan's first example
    return torch.exp(torch.sin(math.pi * x[:, :1]) + x[:, 1:] ** 2)
model = KAN([2, 5, 1]); sync(model)
fwd = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
r = np.random.default_rng(0)
x_test = torch.from_numpy(r.uniform(-1, 1, (200, 2)).astype(np.float32))
LOSSES = []
for step in range(30):
    x = torch.from_numpy(r.uniform(-1, 1, (64, 2)).astype(np.float32))
    if step == 15:
        model(x, update_grid=True)      # adapt the grids to the data, eagerly
    pred = fwd(x)
    loss = F.mse_loss(pred, target_fn(x)) + 1e-3 * model.regularization_loss()
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 5 == 4 or step == 15:
        LOSSES.append(loss.item())
with torch.no_grad():
    LOSSES.append(F.mse_loss(fwd(x_test), target_fn(x_test)).item())
LOSSES += model.layers[0].grid[0, ::3].tolist()
