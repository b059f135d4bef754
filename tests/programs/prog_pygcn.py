from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.parameter import Parameter
torch.manual_seed(0)
class GraphConvolution(nn.Module):
    def __init__(s, i, o, bias=True):
        super().__init__(); s.weight = Parameter(torch.FloatTensor(i, o)); s.bias = Parameter(torch.FloatTensor(o)) if bias else None
        stdv = 1. / math.sqrt(s.weight.size(1)); s.weight.data.uniform_(-stdv, stdv); s.bias.data.uniform_(-stdv, stdv)
    def forward(s, input, adj):
        support = torch.mm(input, s.weight); output = torch.spmm(adj, support)
        return output + s.bias
class GCN(nn.Module):
    def __init__(s, nfeat, nhid, nclass, dropout):
        super().__init__(); s.gc1 = GraphConvolution(nfeat, nhid); s.gc2 = GraphConvolution(nhid, nclass); s.dropout = dropout
    def forward(s, x, adj):
        x = F.relu(s.gc1(x, adj)); x = F.dropout(x, s.dropout, training=s.training)
        return F.log_softmax(torch.sparse.mm(adj, x @ s.gc2.weight) + s.gc2.bias, dim=1)
r = np.random.default_rng(0)
N, E = 60, 200
src, dst = r.integers(0, N, E), r.integers(0, N, E)
A = np.zeros((N, N), np.float32); A[src, dst] = 1; A = A + A.T + np.eye(N, dtype=np.float32); A = (A > 0).astype(np.float32)
d = A.sum(1); A = A / d[:, None]
coo = np.stack(np.nonzero(A))
adj = torch.sparse.FloatTensor(torch.LongTensor(coo), torch.FloatTensor(A[coo[0], coo[1]]), torch.Size(A.shape))
adj2 = torch.tensor(A).to_sparse().coalesce()
assert torch.equal(adj2.indices(), adj.coalesce().indices())
features = torch.from_numpy(r.standard_normal((N, 16)).astype(np.float32)); labels = torch.from_numpy(r.integers(0, 4, N))
model = GCN(16, 32, 4, 0.0); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
fwd = comp(model); LOSSES = []
for epoch in range(4):
    model.train(); opt.zero_grad()
    output = fwd(features, adj)
    loss = F.nll_loss(output[:40], labels[:40]); loss.backward(); opt.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    out = model(features, adj2); LOSSES.append((out[40:].max(1)[1] == labels[40:]).float().mean().item())
LOSSES.append(torch.sparse.sum(adj).item()); LOSSES.append(adj.to_dense().sum().item())
