from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
# graph classification without a graph library, as a paper repo writes it: GIN layers that
# gather messages x[src] and sum them into x[dst] with index_add_ / scatter_add_, graphs of
# different sizes batched by a collate_fn that offsets edge indices, a readout by
# scatter_reduce (mean and amax per graph), compiled with dynamic=True (every batch's node
# and edge counts differ)
class GraphDataset(Dataset):
    def __init__(self, n, rng):
        self.graphs = []
        for _ in range(n):
            nodes = int(rng.integers(5, 12)); edges = int(rng.integers(nodes, 3 * nodes))
            ei = rng.integers(0, nodes, (2, edges))
            x = rng.standard_normal((nodes, 7)).astype(np.float32)
            self.graphs.append((x, np.concatenate([ei, ei[::-1]], 1), int(x[:, 0].sum() > 0)))
    def __len__(self): return len(self.graphs)
    def __getitem__(self, i):
        x, ei, y = self.graphs[i]
        return torch.from_numpy(x), torch.from_numpy(ei), y
def collate(batch):
    xs, eis, bs, ys, off = [], [], [], [], 0
    for i, (x, ei, y) in enumerate(batch):
        xs.append(x); eis.append(ei + off); bs.append(torch.full((x.size(0),), i, dtype=torch.long)); ys.append(y)
        off += x.size(0)
    return torch.cat(xs), torch.cat(eis, 1), torch.cat(bs), torch.tensor(ys)
class GINConv(nn.Module):
    def __init__(self, d_in, d_out, eps=0.0):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.BatchNorm1d(d_out), nn.ReLU(), nn.Linear(d_out, d_out))
        self.eps = nn.Parameter(torch.tensor([eps]))
    def forward(self, x, edge_index):
        src, dst = edge_index
        agg = torch.zeros_like(x).index_add_(0, dst, x[src])
        return self.mlp((1 + self.eps) * x + agg)
class EdgeGate(nn.Module):   # a gated message: sum_j sigmoid(w . [x_i, x_j]) x_j, by scatter_add_
    def __init__(self, d):
        super().__init__(); self.gate = nn.Linear(2 * d, 1)
    def forward(self, x, edge_index):
        src, dst = edge_index
        msg = torch.sigmoid(self.gate(torch.cat([x[dst], x[src]], -1))) * x[src]
        out = x.new_zeros(x.shape).scatter_add_(0, dst.unsqueeze(-1).expand(-1, x.size(1)), msg)
        return x + out
class GIN(nn.Module):
    def __init__(self, d_in=7, hidden=32, n_cls=2):
        super().__init__()
        self.convs = nn.ModuleList([GINConv(d_in, hidden), GINConv(hidden, hidden)])
        self.gate = EdgeGate(hidden)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, n_cls))
    def forward(self, x, edge_index, batch, num_graphs: int):
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        x = self.gate(x, edge_index)
        idx = batch.unsqueeze(-1).expand(-1, x.size(1))
        mean = x.new_zeros(num_graphs, x.size(1)).scatter_reduce(0, idx, x, reduce="mean", include_self=False)
        mx = x.new_zeros(num_graphs, x.size(1)).scatter_reduce(0, idx, x, reduce="amax", include_self=False)
        return self.head(torch.cat([mean, mx], -1))
r = np.random.default_rng(0)
ds = GraphDataset(40, r)
loader = DataLoader(ds, batch_size=10, sampler=r.permutation(len(ds)).tolist(), collate_fn=collate)
model = GIN(); sync(model)
net = comp(model, dynamic=True)
opt = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
LOSSES = []
for epoch in range(2):
    model.train()
    for x, ei, b, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(net(x, ei, b, int(b.max()) + 1), y)
        loss.backward(); opt.step(); sched.step()
        LOSSES.append(loss.item())
model.eval(); correct = 0
with torch.no_grad():
    for x, ei, b, y in DataLoader(ds, batch_size=16, collate_fn=collate):
        out = net(x, ei, b, int(b.max()) + 1)
        correct += int((out.argmax(-1) == y).sum()); LOSSES.append(out.logsumexp(-1).sum().item())
LOSSES.append(correct)
