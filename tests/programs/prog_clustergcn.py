from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Cluster-GCN (Chiang et al. 2019; the google-research cluster_gcn recipe in PyTorch),
# scaled down: the graph cut into parts (a numpy BFS partition standing in for METIS), each
# step a union of random clusters whose block of the adjacency is taken by index_select on
# rows then columns, self-loops added, row-normalized with the diagonal enhancement
# A' + lambda * diag(A'), a multi-layer GCN with layer-wise concatenated skip connections,
# dropout off, masked cross-entropy on the batch's training nodes; cluster batches of
# changing sizes compiled with dynamic=True; Adam; full-graph inference at the end

rng = np.random.default_rng(0)
N, F_IN, C, PARTS = 96, 8, 3, 8


def make_graph():
    centers = rng.standard_normal((C, F_IN))
    y = rng.integers(0, C, N)
    x = centers[y] + rng.standard_normal((N, F_IN))
    src = rng.integers(0, N, 4 * N)
    dst = np.where(rng.random(4 * N) < 0.7, rng.permutation(np.repeat(np.arange(N), 4)), rng.integers(0, N, 4 * N))
    a = np.zeros((N, N), np.float32)
    a[src, dst] = 1
    a = np.maximum(a, a.T)
    np.fill_diagonal(a, 0)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y), torch.from_numpy(a)


def partition_graph(adj, num_parts):
    order, seen = [], np.zeros(N, bool)
    for start in rng.permutation(N):
        if seen[start]:
            continue
        queue = [start]; seen[start] = True
        while queue:
            u = queue.pop(0); order.append(u)
            for v in np.nonzero(adj[u])[0]:
                if not seen[v]:
                    seen[v] = True; queue.append(v)
    return np.array_split(np.array(order), num_parts)


def normalize_adj_diag_enhance(adj, diag_lambda=1.0):
    adj = adj + torch.eye(adj.shape[0])
    rowsum = adj.sum(1)
    d_inv = 1.0 / (rowsum + 1e-20)
    adj = d_inv[:, None] * adj
    return adj + diag_lambda * torch.diag(torch.diag(adj))


class GraphConvolution(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x, adj):
        return torch.mm(adj, torch.mm(x, self.weight)) + self.bias


class ClusterGCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, num_layers=3, dropout=0.0):
        super().__init__()
        self.layers = nn.ModuleList([GraphConvolution(nfeat, nhid)])
        for _ in range(num_layers - 2):
            self.layers.append(GraphConvolution(2 * nhid, nhid))
        self.out = GraphConvolution(2 * nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        for layer in self.layers:
            h = F.relu(layer(x, adj))
            x = torch.cat([h, F.normalize(h, dim=1)], dim=1)   # layer-wise skip of the normalized copy
            x = F.dropout(x, self.dropout, training=self.training)
        return self.out(x, adj)


x_all, y_all, adj_all = make_graph()
train_mask_all = torch.from_numpy(rng.random(N) < 0.6)
parts = partition_graph(adj_all.numpy(), PARTS)
net = ClusterGCN(F_IN, 16, C); sync(net)
model = comp(net, dynamic=True)
optimizer = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
LOSSES = []
for epoch in range(2):
    net.train()
    perm = rng.permutation(PARTS)
    for b in range(0, PARTS, 2):
        nodes = torch.from_numpy(np.sort(np.concatenate([parts[p] for p in perm[b:b + 2]])))
        sub_adj = adj_all.index_select(0, nodes).index_select(1, nodes)
        sub_adj = normalize_adj_diag_enhance(sub_adj)
        x, y, mask = x_all[nodes], y_all[nodes], train_mask_all[nodes]
        out = model(x, sub_adj)
        loss = F.cross_entropy(out[mask], y[mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
net.eval()
with torch.no_grad():
    out = model(x_all, normalize_adj_diag_enhance(adj_all))
    test = ~train_mask_all
    LOSSES += [F.cross_entropy(out[test], y_all[test]).item(), (out.argmax(1)[test] == y_all[test]).float().mean().item()]
