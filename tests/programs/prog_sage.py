from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader
torch.manual_seed(0)
# GraphSAGE with neighbour sampling as the paper's minibatch code and PyG's NeighborLoader
# do it without a graph library: the graph in CSR (numpy), each batch of seed nodes sampled
# two hops out (up to 5 then 3 neighbours a node, without replacement) into blocks of
# relabelled (src, dst) edges, so every step has its own node and edge counts; SAGEConv's
# mean aggregation by index_select + index_add_ over a degree by scatter_add_, and by
# scatter_reduce in the second layer, lin_l(mean) + lin_r(x_dst), L2-normalized hidden
# embeddings; layer-wise full-graph inference at the end under no_grad
def make_graph(r, n=120, feats=12, classes=3):
    src = r.integers(0, n, 4 * n); dst = (src + 1 + r.integers(0, n - 1, 4 * n)) % n
    src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.argsort(dst, kind="stable")
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    x = r.standard_normal((n, feats)).astype(np.float32)
    y = (x[:, :classes] + 0.3 * r.standard_normal((n, classes))).argmax(1)
    return rowptr, src[order], torch.from_numpy(x), torch.from_numpy(y)
def sample_blocks(seeds, fanouts, rowptr, col, r):
    """Blocks from the last hop to the seeds: (n_src nodes' ids, (src, dst) local edges, n_dst)."""
    blocks, nodes = [], seeds
    for k in fanouts:
        srcs, dsts = [], []
        for i, v in enumerate(nodes):
            nbrs = col[rowptr[v]:rowptr[v + 1]]
            if len(nbrs) > k:
                nbrs = r.choice(nbrs, k, replace=False)
            srcs.append(nbrs); dsts.append(np.full(len(nbrs), i))
        srcs, dsts = np.concatenate(srcs), np.concatenate(dsts)
        # the dst nodes come first among the src nodes, as in DGL's to_block
        first = {}
        for j, u in enumerate(np.concatenate([nodes, srcs])):
            first.setdefault(u, len(first))
        all_nodes = np.array(list(first))
        local = np.array([first[u] for u in srcs], dtype=np.int64)
        blocks.insert(0, (torch.from_numpy(all_nodes), torch.from_numpy(np.stack([local, dsts])), len(nodes)))
        nodes = all_nodes
    return blocks
class SAGEConv(nn.Module):
    def __init__(self, in_channels, out_channels, aggr="add", normalize=False):
        super().__init__()
        self.lin_l = nn.Linear(in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)
        self.aggr, self.normalize = aggr, normalize
    def forward(self, x, edge_index, num_dst: int):
        src, dst = edge_index
        x_dst = x[:num_dst]
        msg = x.index_select(0, src)
        if self.aggr == "add":
            out = torch.zeros(num_dst, x.size(1), dtype=x.dtype).index_add_(0, dst, msg)
            deg = torch.zeros(num_dst, dtype=x.dtype).scatter_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
            deg = deg.clamp(min=1)   # torch_geometric.utils.degree
            out = out / deg.unsqueeze(-1)
        else:
            idx = dst.unsqueeze(-1).expand_as(msg)
            out = x.new_zeros(num_dst, x.size(1)).scatter_reduce(0, idx, msg, reduce="mean", include_self=False)
        out = self.lin_l(out) + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out
class SAGE(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(in_channels, hidden_channels, "add", normalize=True),
                                    SAGEConv(hidden_channels, out_channels, "mean")])
    def forward(self, x, adjs):
        for i, (edge_index, size) in enumerate(adjs):
            x = self.convs[i](x, edge_index, size)
            if i != len(self.convs) - 1:
                x = F.relu(x)
                x = F.dropout(x, p=0.0, training=self.training)
        return x.log_softmax(dim=-1)
r = np.random.default_rng(0)
rowptr, col, x, y = make_graph(r)
train_idx = torch.arange(80)
model = SAGE(x.size(1), 16, 3); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
loader = DataLoader(train_idx, batch_size=16, shuffle=False)
LOSSES = []
for epoch in range(2):
    model.train()
    total_loss = total_correct = 0
    for seeds in loader:
        blocks = sample_blocks(seeds.numpy(), [5, 3], rowptr, col, r)
        n_id = blocks[0][0]
        adjs = [(ei, size) for _, ei, size in blocks]
        optimizer.zero_grad()
        out = net(x[n_id], adjs)
        loss = F.nll_loss(out, y[seeds])
        loss.backward()
        optimizer.step()
        total_loss += float(loss)
        total_correct += int(out.argmax(dim=-1).eq(y[seeds]).sum())
        LOSSES.append(loss.item())
    LOSSES += [total_loss, total_correct]
@torch.no_grad()
def inference(x_all):   # every node, layer by layer, all neighbours
    edge_index = torch.from_numpy(np.stack([col, np.repeat(np.arange(len(rowptr) - 1), np.diff(rowptr))]))
    for i, conv in enumerate(model.convs):
        x_all = conv(x_all, edge_index, x_all.size(0))
        if i != len(model.convs) - 1:
            x_all = F.relu(x_all)
    return x_all
model.eval()
out = inference(x)
LOSSES += [F.cross_entropy(out, y).item(), int((out.argmax(-1) == y).sum())]
