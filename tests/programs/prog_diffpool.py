from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# DiffPool (Ying et al.) graph classification as PyTorch Geometric's proteins_diff_pool
# example writes it, its dense layers written out: batches padded to the largest graph
# (to_dense_batch's node mask), DenseSAGEConv (adj @ x over clamped degrees, a root
# weight, L2 normalize, masked), BatchNorm1d over the flattened nodes, soft cluster
# assignments by softmax, dense_diff_pool (S^T X, S^T A S, the link loss
# ||A - S S^T||_F / numel, the entropy loss), a second pooling, a mean readout; the
# largest graph's size changes between batches (dynamic=True), Adam, nll_loss plus both
# auxiliary losses
def dense_diff_pool(x, adj, s, mask=None):
    x = x.unsqueeze(0) if x.dim() == 2 else x
    adj = adj.unsqueeze(0) if adj.dim() == 2 else adj
    s = s.unsqueeze(0) if s.dim() == 2 else s
    batch_size, num_nodes, _ = x.size()
    s = torch.softmax(s, dim=-1)
    if mask is not None:
        mask = mask.view(batch_size, num_nodes, 1).to(x.dtype)
        x, s = x * mask, s * mask
    out = torch.matmul(s.transpose(1, 2), x)
    out_adj = torch.matmul(torch.matmul(s.transpose(1, 2), adj), s)
    link_loss = adj - torch.matmul(s, s.transpose(1, 2))
    link_loss = torch.norm(link_loss, p=2)
    link_loss = link_loss / adj.numel()
    ent_loss = (-s * torch.log(s + 1e-15)).sum(dim=-1).mean()
    return out, out_adj, link_loss, ent_loss
class DenseSAGEConv(nn.Module):
    def __init__(self, in_channels, out_channels, normalize=False, bias=True):
        super().__init__()
        self.normalize = normalize
        self.lin_rel = nn.Linear(in_channels, out_channels, bias=False)
        self.lin_root = nn.Linear(in_channels, out_channels, bias=bias)
    def forward(self, x, adj, mask=None):
        x = x.unsqueeze(0) if x.dim() == 2 else x
        adj = adj.unsqueeze(0) if adj.dim() == 2 else adj
        B, N, _ = adj.size()
        out = torch.matmul(adj, x)
        out = out / adj.sum(dim=-1, keepdim=True).clamp(min=1)
        out = self.lin_rel(out) + self.lin_root(x)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        if mask is not None:
            out = out * mask.view(B, N, 1).to(x.dtype)
        return out
class GNN(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels, normalize=False, lin=True):
        super().__init__()
        self.convs = nn.ModuleList()
        self.bns = nn.ModuleList()
        self.convs.append(DenseSAGEConv(in_channels, hidden_channels, normalize))
        self.bns.append(nn.BatchNorm1d(hidden_channels))
        self.convs.append(DenseSAGEConv(hidden_channels, hidden_channels, normalize))
        self.bns.append(nn.BatchNorm1d(hidden_channels))
        self.convs.append(DenseSAGEConv(hidden_channels, out_channels, normalize))
        self.bns.append(nn.BatchNorm1d(out_channels))
        self.lin = nn.Linear(2 * hidden_channels + out_channels, out_channels) if lin is True else None
    def bn(self, i, x):
        batch_size, num_nodes, num_channels = x.size()
        x = x.view(-1, num_channels)
        x = self.bns[i](x)
        return x.view(batch_size, num_nodes, num_channels)
    def forward(self, x, adj, mask=None):
        xs = []
        for step in range(len(self.convs)):
            x = self.bn(step, F.relu(self.convs[step](x, adj, mask)))
            xs.append(x)
        x = torch.cat(xs, dim=-1)
        if self.lin is not None:
            x = F.relu(self.lin(x))
        return x
class Net(nn.Module):
    def __init__(self, num_features, num_classes, max_nodes):
        super().__init__()
        num_nodes = max(2, int(0.25 * max_nodes))
        self.gnn1_pool = GNN(num_features, 16, num_nodes)
        self.gnn1_embed = GNN(num_features, 16, 16, lin=False)
        num_nodes = max(2, int(0.25 * num_nodes))
        self.gnn2_pool = GNN(3 * 16, 16, num_nodes)
        self.gnn2_embed = GNN(3 * 16, 16, 16, lin=False)
        self.gnn3_embed = GNN(3 * 16, 16, 16, lin=False)
        self.lin1 = nn.Linear(3 * 16, 16)
        self.lin2 = nn.Linear(16, num_classes)
    def forward(self, x, adj, mask=None):
        s = self.gnn1_pool(x, adj, mask)
        x = self.gnn1_embed(x, adj, mask)
        x, adj, l1, e1 = dense_diff_pool(x, adj, s, mask)
        s = self.gnn2_pool(x, adj)
        x = self.gnn2_embed(x, adj)
        x, adj, l2, e2 = dense_diff_pool(x, adj, s)
        x = self.gnn3_embed(x, adj)
        x = x.mean(dim=1)
        x = F.relu(self.lin1(x))
        x = self.lin2(x)
        return F.log_softmax(x, dim=-1), l1 + l2, e1 + e2
def random_graph(rng):
    """Label 0: one ring; label 1: two cliques joined by a bridge; node features by degree."""
    label = int(rng.integers(0, 2))
    n = int(rng.integers(8, 25))
    A = np.zeros((n, n), np.float32)
    if label == 0:
        for i in range(n):
            A[i, (i + 1) % n] = A[(i + 1) % n, i] = 1
    else:
        h = n // 2
        A[:h, :h] = 1; A[h:, h:] = 1; A[h - 1, h] = A[h, h - 1] = 1
        np.fill_diagonal(A, 0)
    deg = A.sum(1)
    x = np.stack([deg / n, np.ones(n), rng.normal(size=n)], 1).astype(np.float32)
    return x, A, label
def to_dense_batch(graphs):
    n_max = max(g[0].shape[0] for g in graphs)
    x = torch.zeros(len(graphs), n_max, 3); adj = torch.zeros(len(graphs), n_max, n_max)
    mask = torch.zeros(len(graphs), n_max, dtype=torch.bool)
    for i, (xi, ai, _) in enumerate(graphs):
        n = xi.shape[0]
        x[i, :n] = torch.from_numpy(xi); adj[i, :n, :n] = torch.from_numpy(ai); mask[i, :n] = True
    return x, adj, mask, torch.tensor([g[2] for g in graphs])
rng = np.random.default_rng(0)
graphs = [random_graph(rng) for _ in range(40)]
max_nodes = 24
model = Net(3, 2, max_nodes); sync(model)
net = comp(model, dynamic=True)
optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
def train(epoch):
    model.train()
    loss_all = 0
    order = rng.permutation(32)
    for it in range(0, 32, 8):
        x, adj, mask, y = to_dense_batch([graphs[i] for i in order[it:it + 8]])
        optimizer.zero_grad()
        output, link_loss, ent_loss = net(x, adj, mask)
        loss = F.nll_loss(output, y.view(-1)) + link_loss + ent_loss
        loss.backward()
        loss_all += y.size(0) * float(loss)
        optimizer.step()
        LOSSES.append(loss.item())
    return loss_all / 32
@torch.no_grad()
def test(batch):
    model.eval()
    x, adj, mask, y = to_dense_batch(batch)
    out, _, _ = net(x, adj, mask)
    pred = out.max(dim=1)[1]
    return F.nll_loss(out, y).item(), int(pred.eq(y.view(-1)).sum().item())
LOSSES = []
for epoch in range(1, 4):
    LOSSES.append(train(epoch))
LOSSES += list(test(graphs[32:]))
