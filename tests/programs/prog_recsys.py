from _harness import sync  # the runner: weights shared with the PyTorch run
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
n_users, n_items, dim = 50, 80, 16
# BPR matrix factorization with sparse embeddings and SparseAdam
class BPRMF(nn.Module):
    def __init__(s):
        super().__init__()
        s.user = nn.Embedding(n_users, dim, sparse=True); s.item = nn.Embedding(n_items, dim, sparse=True)
        s.item_bias = nn.Embedding(n_items, 1, sparse=True)
        nn.init.normal_(s.user.weight, std=0.1); nn.init.normal_(s.item.weight, std=0.1); nn.init.zeros_(s.item_bias.weight)
    def score(s, u, i): return (s.user(u) * s.item(i)).sum(-1) + s.item_bias(i).squeeze(-1)
    def forward(s, u, pos, neg):
        return -F.logsigmoid(s.score(u, pos) - s.score(u, neg)).mean()
r = np.random.default_rng(0)
bpr = BPRMF(); sync(bpr); opt = torch.optim.SparseAdam(list(bpr.parameters()), lr=0.01)
LOSSES = []
for it in range(3):
    u = torch.from_numpy(r.integers(0, n_users, 64)); pos = torch.from_numpy(r.integers(0, n_items, 64))
    neg = torch.from_numpy(r.integers(0, n_items, 64))   # torch.randint's role (the same stream)
    opt.zero_grad(); loss = bpr(u, pos, neg); loss.backward(); opt.step(); LOSSES.append(loss.item())
neg = torch.randint(0, n_items, (64,)); LOSSES.append(float(neg.min() >= 0 and neg.max() < n_items))
# NCF-style model: user history by EmbeddingBag(mode='mean', offsets), BCE with logits, Adagrad
class NCF(nn.Module):
    def __init__(s):
        super().__init__()
        s.user = nn.Embedding(n_users, dim); s.item = nn.Embedding(n_items, dim)
        s.history = nn.EmbeddingBag(n_items, dim, mode='mean')
        s.mlp = nn.Sequential(nn.Linear(3 * dim, 32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 1))
    def forward(s, u, i, hist, offsets):
        return s.mlp(torch.cat([s.user(u), s.item(i), s.history(hist, offsets)], -1)).squeeze(-1)
ncf = NCF(); sync(ncf)
opt = torch.optim.Adagrad(ncf.parameters(), lr=0.05, weight_decay=1e-4, initial_accumulator_value=0.1)
crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(2.0))
for it in range(3):
    u = torch.from_numpy(r.integers(0, n_users, 32)); i = torch.from_numpy(r.integers(0, n_items, 32))
    lens = r.integers(1, 6, 32); hist = torch.from_numpy(r.integers(0, n_items, int(lens.sum())))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.from_numpy(lens).cumsum(0)[:-1]])
    label = torch.from_numpy((r.random(32) < 0.3).astype(np.float32))
    logits = ncf(u, i, hist, offsets); loss = crit(logits, label)
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES += [loss.item(), torch.sigmoid(logits).mean().item()]
with torch.no_grad():  # top-10 recommendation for one user
    scores = bpr.user.weight[3] @ bpr.item.weight.t() + bpr.item_bias.weight.squeeze(-1)
    LOSSES.append(scores.topk(10).values.sum().item())
bag = nn.EmbeddingBag(n_items, 4, mode='sum', padding_idx=0); sync(bag)
LOSSES.append(bag(torch.tensor([[1, 0, 3], [0, 0, 2]])).sum().item())
LOSSES.append(bag(torch.tensor([1, 2, 0, 4]), torch.tensor([0, 1]), per_sample_weights=torch.tensor([0.5, 1., 2., 3.])).sum().item())
