from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal, spectral_norm
from torch.optim.swa_utils import AveragedModel, SWALR, update_bn, get_ema_multi_avg_fn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset
# A small GAT on a random graph (edge attention by leaky ReLU, a softmax over each node's
# incoming edges by scatter_reduce amax / index_add_ sums, multi-head concat, then a mean
# head) trained with the utilities public code reaches for: an orthogonal parametrization
# and a spectral-normed projection, a checkpointed first layer, clip_grad_value_,
# OneCycleLR, then stochastic weight averaging (AveragedModel, SWALR, update_bn for its
# BatchNorm) and an EMA copy, ReduceLROnPlateau on the validation loss
torch.manual_seed(0)


class Symmetric(nn.Module):   # the parametrize tutorial's own parametrization
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)


def softmax_by_target(alpha, index, num_nodes):
    # torch_geometric.utils.softmax without torch_scatter: max and sum per target node
    amax = alpha.new_full((num_nodes, alpha.size(1)), float('-inf'))
    amax = amax.scatter_reduce(0, index.unsqueeze(-1).expand_as(alpha), alpha, reduce='amax', include_self=True)
    out = (alpha - amax.index_select(0, index)).exp()
    denom = torch.zeros(num_nodes, alpha.size(1), dtype=alpha.dtype).index_add_(0, index, out)
    return out / (denom.index_select(0, index) + 1e-16)


class GATConv(nn.Module):
    def __init__(self, in_channels, out_channels, heads=1, concat=True, negative_slope=0.2, dropout=0.0):
        super().__init__()
        self.heads, self.out_channels, self.concat = heads, out_channels, concat
        self.negative_slope, self.dropout = negative_slope, dropout
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.zeros(heads * out_channels if concat else out_channels))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x, edge_index):
        N, H, C = x.size(0), self.heads, self.out_channels
        x = self.lin(x).view(-1, H, C)
        alpha_src = (x * self.att_src).sum(dim=-1)
        alpha_dst = (x * self.att_dst).sum(dim=-1)
        src, dst = edge_index[0], edge_index[1]
        alpha = alpha_src[src] + alpha_dst[dst]
        alpha = F.leaky_relu(alpha, self.negative_slope)
        alpha = softmax_by_target(alpha, dst, N)
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        msg = x[src] * alpha.unsqueeze(-1)
        out = torch.zeros(N, H, C, dtype=x.dtype).scatter_add_(0, dst.view(-1, 1, 1).expand_as(msg), msg)
        if self.concat:
            out = out.view(-1, H * C)
        else:
            out = out.mean(dim=1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self, in_dim, hid, n_cls, heads=4):
        super().__init__()
        self.inp = nn.Linear(in_dim, in_dim)
        parametrize.register_parametrization(self.inp, "weight", Symmetric())
        self.conv1 = GATConv(in_dim, hid, heads=heads)
        self.norm = nn.BatchNorm1d(hid * heads, affine=False)
        self.mix = orthogonal(nn.Linear(hid * heads, hid * heads))
        self.conv2 = GATConv(hid * heads, n_cls, heads=2, concat=False)
        spectral_norm(self.conv2.lin)
        self.register_buffer("edge_index", torch.zeros(2, 0, dtype=torch.long))

    def forward(self, x):
        x = F.elu(self.inp(x))
        if self.training:
            x = checkpoint(self.conv1, x, self.edge_index, use_reentrant=False)
        else:
            x = self.conv1(x, self.edge_index)
        # (normalized after the ELU: conv1's bias straight into the BatchNorm would get a
        # gradient zero up to rounding, which Adam turns into lr-sized steps of either sign)
        x = self.norm(F.elu(x))
        x = x + 0.5 * self.mix(x)
        return self.conv2(x, self.edge_index)


rng = np.random.default_rng(0)
N, E, D, K = 40, 160, 12, 3
src = rng.integers(0, N, E); dst = rng.integers(0, N, E)
loops = np.arange(N)
edge_index = torch.from_numpy(np.stack([np.concatenate([src, loops]), np.concatenate([dst, loops])]))
feats = torch.from_numpy(rng.standard_normal((N, D)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, K, N))
train_mask = torch.zeros(N, dtype=torch.bool); train_mask[:28] = True
val_mask = ~train_mask

net = GAT(D, 8, K)
net.edge_index = edge_index
sync(net)
model = comp(net)
optimizer = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
epochs, swa_start = 10, 6
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.02, total_steps=swa_start, pct_start=0.3)
swa_model = AveragedModel(net)
ema_model = AveragedModel(net, multi_avg_fn=get_ema_multi_avg_fn(0.9))
swa_scheduler = SWALR(optimizer, swa_lr=0.005, anneal_epochs=2, anneal_strategy="cos")
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)
LOSSES = []
for epoch in range(epochs):
    net.train()
    optimizer.zero_grad()
    out = model(feats)
    loss = F.cross_entropy(out[train_mask], labels[train_mask])
    loss.backward()
    torch.nn.utils.clip_grad_value_(net.parameters(), clip_value=0.5)
    optimizer.step()
    ema_model.update_parameters(net)
    if epoch >= swa_start:
        swa_model.update_parameters(net)
        swa_scheduler.step()
    else:
        scheduler.step()
    net.eval()
    with torch.no_grad():
        val_loss = F.cross_entropy(model(feats)[val_mask], labels[val_mask])
    if epoch >= swa_start:
        plateau.step(val_loss)
    LOSSES += [loss.item(), val_loss.item()]
LOSSES.append(optimizer.param_groups[0]["lr"])
# BatchNorm statistics for the averaged weights, from a loader of node-feature batches
loader = DataLoader(TensorDataset(feats.repeat(3, 1).view(3, N, D)), batch_size=None)
update_bn(loader, swa_model)
swa_model.eval(); ema_model.eval()
with torch.no_grad():
    LOSSES.append(F.cross_entropy(swa_model(feats), labels).item())
    LOSSES.append(F.cross_entropy(ema_model(feats), labels).item())
    LOSSES.append(swa_model.module.norm.running_var.mean().item())
    W = net.mix.weight
    LOSSES.append((W @ W.t() - torch.eye(W.size(0))).abs().max().item() < 1e-4)
    S = net.inp.weight
    LOSSES.append((S - S.t()).abs().max().item())
    LOSSES.append(torch.linalg.matrix_norm(net.conv2.lin.weight, ord=2).item())
LOSSES.append(float(swa_model.n_averaged.item()))
with parametrize.cached():
    LOSSES.append(net.inp.weight.sum().item())
parametrize.remove_parametrizations(net.inp, "weight", leave_parametrized=True)
LOSSES.append(float(isinstance(net.inp.weight, nn.Parameter)))
