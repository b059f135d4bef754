from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# LightGCN (He et al.; the LightGCN-PyTorch recipe) on a synthetic user-item graph: the
# symmetric-normalized bipartite adjacency D^-1/2 A D^-1/2 built as a torch.sparse_coo_tensor
# (degrees by scatter_add_ over the edge list, coalesce), K rounds of torch.sparse.mm
# propagation of the stacked user and item tables, the layer mean by torch.stack(...).mean,
# torch.split back into users and items, the BPR loss by softplus(neg - pos) over sampled
# (user, positive, negative) triples with an L2 term on the ego embeddings of the batch,
# Adam, and Recall@5 / NDCG@5 from a full score matrix whose training items are masked to
# -inf by index_put_ before topk
class LightGCN(nn.Module):
    def __init__(self, n_users, n_items, graph, dim=16, n_layers=3):
        super().__init__()
        self.n_users, self.n_items, self.n_layers = n_users, n_items, n_layers
        self.embedding_user = nn.Embedding(n_users, dim)
        self.embedding_item = nn.Embedding(n_items, dim)
        nn.init.normal_(self.embedding_user.weight, std=0.1)
        nn.init.normal_(self.embedding_item.weight, std=0.1)
        self.graph = graph
    def computer(self):
        all_emb = torch.cat([self.embedding_user.weight, self.embedding_item.weight])
        embs = [all_emb]
        for _ in range(self.n_layers):
            all_emb = torch.sparse.mm(self.graph, all_emb)
            embs.append(all_emb)
        light_out = torch.mean(torch.stack(embs, dim=1), dim=1)
        return torch.split(light_out, [self.n_users, self.n_items])
    def bpr_loss(self, users, pos, neg):
        all_users, all_items = self.computer()
        u, p, n = all_users[users], all_items[pos], all_items[neg]
        reg = (self.embedding_user(users).norm(2).pow(2) + self.embedding_item(pos).norm(2).pow(2)
               + self.embedding_item(neg).norm(2).pow(2)) / 2 / float(len(users))
        pos_scores = torch.mul(u, p).sum(dim=1)
        neg_scores = torch.mul(u, n).sum(dim=1)
        loss = torch.mean(torch.nn.functional.softplus(neg_scores - pos_scores))
        return loss, reg
    def forward(self, users, pos, neg):
        return self.bpr_loss(users, pos, neg)
def normalized_adjacency(users, items, n_users, n_items):
    n = n_users + n_items
    row = torch.cat([users, items + n_users])
    col = torch.cat([items + n_users, users])
    deg = torch.zeros(n).scatter_add_(0, row, torch.ones(len(row)))
    d_inv_sqrt = deg.pow(-0.5)
    d_inv_sqrt[torch.isinf(d_inv_sqrt)] = 0.0
    vals = d_inv_sqrt[row] * d_inv_sqrt[col]
    return torch.sparse_coo_tensor(torch.stack([row, col]), vals, (n, n)).coalesce()
rng = np.random.default_rng(0)
N_USERS, N_ITEMS = 40, 60
taste = rng.integers(0, 4, N_USERS)
pairs = {(u, i) for u in range(N_USERS) for i in rng.choice(np.arange(taste[u], N_ITEMS, 4), 6, replace=False)}
pairs = np.array(sorted(pairs))
test_mask = rng.random(len(pairs)) < 0.2
train, test = pairs[~test_mask], pairs[test_mask]
graph = normalized_adjacency(torch.from_numpy(train[:, 0]), torch.from_numpy(train[:, 1]), N_USERS, N_ITEMS)
model = LightGCN(N_USERS, N_ITEMS, graph); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
train_set = set(map(tuple, train))
LOSSES = [graph._nnz(), graph.values().sum().item()]
for epoch in range(3):
    order = rng.permutation(len(train))
    for b in range(0, len(order), 64):
        idx = order[b:b + 64]
        users, pos = train[idx, 0], train[idx, 1]
        neg = rng.integers(0, N_ITEMS, len(idx))
        for k in range(len(neg)):
            while (users[k], neg[k]) in train_set:
                neg[k] = rng.integers(0, N_ITEMS)
        loss, reg = net(torch.from_numpy(users), torch.from_numpy(pos), torch.from_numpy(neg))
        total = loss + 1e-4 * reg
        opt.zero_grad(); total.backward(); opt.step()
        LOSSES.append(total.item())
model.eval()
with torch.no_grad():
    all_users, all_items = model.computer()
    rating = all_users @ all_items.t()
    rating.index_put_((torch.from_numpy(train[:, 0]), torch.from_numpy(train[:, 1])), torch.tensor(-np.inf))
    _, top = torch.topk(rating, k=5)
    hits = torch.zeros(N_USERS, N_ITEMS)
    hits[torch.from_numpy(test[:, 0]), torch.from_numpy(test[:, 1])] = 1.0
    got = hits.gather(1, top)
    n_test = hits.sum(1)
    recall = (got.sum(1) / n_test.clamp(min=1))[n_test > 0].mean()
    ndcg = (got / torch.log2(torch.arange(2, 7).float())).sum(1)[n_test > 0].mean()
    LOSSES += [recall.item(), ndcg.item(), rating.clamp(min=-10).sum().item()]
