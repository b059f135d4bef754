from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader
torch.manual_seed(0)
# SchNet (as PyTorch Geometric writes it) on random molecules: a collate_fn batching
# molecules of different sizes into one graph with a batch vector, a radius graph from
# torch.cdist, a same-molecule mask and a cutoff, edge lists by nonzero; Gaussian RBF
# expansion, continuous-filter convolutions aggregated by index_add_ / scatter_add_, the
# shifted softplus, a cosine cutoff, per-molecule energies summed by the batch vector and
# forces as -autograd.grad(energy, pos, create_graph=True) trained together
# (energy + force matching) under Adam and ReduceLROnPlateau
class ShiftedSoftplus(nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = torch.log(torch.tensor(2.0)).item()
    def forward(self, x):
        return F.softplus(x) - self.shift
class GaussianSmearing(nn.Module):
    def __init__(self, start=0.0, stop=5.0, num_gaussians=50):
        super().__init__()
        offset = torch.linspace(start, stop, num_gaussians)
        self.coeff = -0.5 / (offset[1] - offset[0]).item() ** 2
        self.register_buffer('offset', offset)
    def forward(self, dist):
        dist = dist.view(-1, 1) - self.offset.view(1, -1)
        return torch.exp(self.coeff * torch.pow(dist, 2))
class CFConv(nn.Module):
    def __init__(self, in_channels, out_channels, num_filters, nn_filter, cutoff):
        super().__init__()
        self.lin1 = nn.Linear(in_channels, num_filters, bias=False)
        self.lin2 = nn.Linear(num_filters, out_channels)
        self.nn = nn_filter
        self.cutoff = cutoff
        self.reset_parameters()
    def reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.lin1.weight)
        torch.nn.init.xavier_uniform_(self.lin2.weight)
        self.lin2.bias.data.fill_(0)
    def forward(self, x, edge_index, edge_weight, edge_attr):
        C = 0.5 * (torch.cos(edge_weight * math.pi / self.cutoff) + 1.0)
        W = self.nn(edge_attr) * C.view(-1, 1)
        x = self.lin1(x)
        row, col = edge_index
        msg = x[col] * W                       # message from source j to target i
        out = torch.zeros_like(x).index_add_(0, row, msg)
        return self.lin2(out)
class InteractionBlock(nn.Module):
    def __init__(self, hidden_channels, num_gaussians, num_filters, cutoff):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(num_gaussians, num_filters), ShiftedSoftplus(),
                                 nn.Linear(num_filters, num_filters))
        self.conv = CFConv(hidden_channels, hidden_channels, num_filters, self.mlp, cutoff)
        self.act = ShiftedSoftplus()
        self.lin = nn.Linear(hidden_channels, hidden_channels)
    def forward(self, x, edge_index, edge_weight, edge_attr):
        x = self.conv(x, edge_index, edge_weight, edge_attr)
        x = self.act(x)
        return self.lin(x)
class SchNet(nn.Module):
    def __init__(self, hidden_channels=32, num_filters=32, num_interactions=2, num_gaussians=16, cutoff=3.0):
        super().__init__()
        self.hidden_channels, self.cutoff = hidden_channels, cutoff
        self.embedding = nn.Embedding(10, hidden_channels, padding_idx=0)
        self.distance_expansion = GaussianSmearing(0.0, cutoff, num_gaussians)
        self.interactions = nn.ModuleList([InteractionBlock(hidden_channels, num_gaussians, num_filters, cutoff)
                                           for _ in range(num_interactions)])
        self.lin1 = nn.Linear(hidden_channels, hidden_channels // 2)
        self.act = ShiftedSoftplus()
        self.lin2 = nn.Linear(hidden_channels // 2, 1)
        self.register_buffer('atomref', torch.zeros(10, 1))
    def forward(self, z, pos, batch, edge_index, num_graphs: int):
        h = self.embedding(z)
        row, col = edge_index
        edge_weight = (pos[row] - pos[col]).norm(dim=-1)
        edge_attr = self.distance_expansion(edge_weight)
        for interaction in self.interactions:
            h = h + interaction(h, edge_index, edge_weight, edge_attr)
        h = self.lin2(self.act(self.lin1(h)))
        h = h + self.atomref[z]
        out = torch.zeros(num_graphs, 1, dtype=h.dtype).scatter_add_(0, batch.view(-1, 1), h)
        return out.squeeze(-1)
def radius_graph(pos, batch, r):
    """Edges (i <- j) between atoms of one molecule closer than r, self-loops excluded."""
    with torch.no_grad():
        dist = torch.cdist(pos, pos)
        mask = (dist < r) & (batch.view(-1, 1) == batch.view(1, -1))
        mask.fill_diagonal_(False)
        return mask.nonzero().t().contiguous()
def pair_energy(pos, z):
    """The target: a Morse-like pair potential with element-dependent depths (float64)."""
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(pos))
    depth = 0.1 * np.sqrt(np.outer(z, z))
    e = depth * ((1 - np.exp(-1.5 * (d - 1.2))) ** 2 - 1)
    np.fill_diagonal(e, 0)
    return 0.5 * e.sum()
class Molecules(Dataset):
    def __init__(self, n, rng):
        self.items = []
        for _ in range(n):
            k = int(rng.integers(3, 7))
            pos = rng.standard_normal((k, 3)) * 0.9
            z = rng.integers(1, 5, k)
            eps = 1e-4
            energy = pair_energy(pos, z)
            forces = np.zeros_like(pos)
            for a in range(k):
                for c in range(3):
                    p1, p2 = pos.copy(), pos.copy(); p1[a, c] += eps; p2[a, c] -= eps
                    forces[a, c] = -(pair_energy(p1, z) - pair_energy(p2, z)) / (2 * eps)
            self.items.append((z, pos.astype(np.float32), np.float32(energy), forces.astype(np.float32)))
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        return self.items[i]
def collate(items):
    z = torch.from_numpy(np.concatenate([it[0] for it in items]))
    pos = torch.from_numpy(np.concatenate([it[1] for it in items]))
    batch = torch.cat([torch.full((len(it[0]),), i, dtype=torch.long) for i, it in enumerate(items)])
    energy = torch.tensor([it[2] for it in items])
    forces = torch.from_numpy(np.concatenate([it[3] for it in items]))
    return z, pos, batch, energy, forces
rng = np.random.default_rng(0)
train_set, val_set = Molecules(24, rng), Molecules(6, rng)
loader = DataLoader(train_set, batch_size=6, shuffle=False, collate_fn=collate)
model = SchNet(); sync(model)
fwd = comp(model, dynamic=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=0)
rho = 10.0
LOSSES = []
for epoch in range(2):
    model.train()
    total = 0.0
    for z, pos, batch, energy, forces in loader:
        pos.requires_grad_(True)
        edge_index = radius_graph(pos, batch, model.cutoff)
        pred = fwd(z, pos, batch, edge_index, int(batch.max()) + 1)
        pred_forces = -torch.autograd.grad(pred.sum(), pos, create_graph=True)[0]
        loss = F.mse_loss(pred, energy) + rho * F.mse_loss(pred_forces, forces)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        LOSSES += [loss.item(), edge_index.shape[1]]
    model.eval()
    z, pos, batch, energy, forces = collate(val_set.items)
    pos.requires_grad_(True)
    edge_index = radius_graph(pos, batch, model.cutoff)
    pred = fwd(z, pos, batch, edge_index, len(val_set))
    f = -torch.autograd.grad(pred.sum(), pos)[0]
    val = (F.l1_loss(pred, energy) + F.l1_loss(f, forces)).item()
    scheduler.step(val)
    LOSSES += [val, optimizer.param_groups[0]['lr']]
