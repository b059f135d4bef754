from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch, torch.nn as nn
from torch.utils.data import Dataset, DataLoader
# DLRM (facebookresearch/dlrm style): per-feature nn.EmbeddingBag tables (sum and mean) fed
# flat ids with offsets, lookups of changing length per batch, a bottom MLP for the dense
# features, dot interactions (bmm, then the strict lower triangle by index lists, or
# torchrec-style by torch.triu_indices), a top MLP, BCEWithLogits, sparse SGD for the tables
np.random.seed(0); torch.manual_seed(0)


class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        layers = nn.ModuleList()
        for i in range(0, ln.size - 1):
            n = ln[i]
            m = ln[i + 1]
            LL = nn.Linear(int(n), int(m), bias=True)
            mean = 0.0  # std_dev = np.sqrt(variance)
            std_dev = np.sqrt(2 / (m + n))  # np.sqrt(1 / m) # np.sqrt(1 / n)
            W = np.random.normal(mean, std_dev, size=(m, n)).astype(np.float32)
            std_dev = np.sqrt(1 / m)  # np.sqrt(2 / (m + 1))
            bt = np.random.normal(mean, std_dev, size=m).astype(np.float32)
            LL.weight.data = torch.tensor(W, requires_grad=True)
            LL.bias.data = torch.tensor(bt, requires_grad=True)
            layers.append(LL)
            if i == sigmoid_layer:
                layers.append(nn.Sigmoid())
            else:
                layers.append(nn.ReLU())
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln, modes):
        emb_l = nn.ModuleList()
        for i in range(0, ln.size):
            n = ln[i]
            EE = nn.EmbeddingBag(n, m, mode=modes[i], sparse=True)
            W = np.random.uniform(low=-np.sqrt(1 / n), high=np.sqrt(1 / n), size=(n, m)).astype(np.float32)
            EE.weight.data = torch.tensor(W, requires_grad=True)
            emb_l.append(EE)
        return emb_l

    def __init__(self, m_spa, ln_emb, ln_bot, ln_top, modes, arch_interaction_itself=False, triu=False):
        super(DLRM_Net, self).__init__()
        self.arch_interaction_itself = arch_interaction_itself
        self.triu = triu
        self.emb_l = self.create_emb(m_spa, ln_emb, modes)
        self.bot_l = self.create_mlp(ln_bot, -1)
        self.top_l = self.create_mlp(ln_top, ln_top.size - 2)[:-1]   # logits: BCEWithLogits

    def apply_mlp(self, x, layers):
        return layers(x)

    def apply_emb(self, lS_o, lS_i, emb_l):
        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]
            E = emb_l[k]
            V = E(sparse_index_group_batch, sparse_offset_group_batch, per_sample_weights=None)
            ly.append(V)
        return ly

    def interact_features(self, x, ly):
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        if self.triu:   # torchrec's DenseArch/InteractionArch spelling
            li, lj = torch.triu_indices(ni, nj, offset=0 if self.arch_interaction_itself else 1)
            Zflat = Z[:, li, lj]
        else:
            offset = 1 if self.arch_interaction_itself else 0
            li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
            lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
            Zflat = Z[:, li, lj]
        R = torch.cat([x] + [Zflat], dim=1)
        return R

    def forward(self, dense_x, lS_o, lS_i):
        x = self.apply_mlp(dense_x, self.bot_l)
        ly = self.apply_emb(lS_o, lS_i, self.emb_l)
        z = self.interact_features(x, ly)
        p = self.apply_mlp(z, self.top_l)
        return p


class RandomClickDataset(Dataset):
    """Synthetic click logs: dense features, a multi-hot id list per sparse feature."""

    def __init__(self, n, ln_emb, m_den, max_ids, seed):
        rng = np.random.default_rng(seed)
        self.dense = rng.standard_normal((n, m_den)).astype(np.float32)
        self.sparse = [[rng.integers(0, size, rng.integers(1, max_ids + 1)) for size in ln_emb] for _ in range(n)]
        self.y = (rng.random(n) < 0.25).astype(np.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.dense[i], self.sparse[i], self.y[i]


def collate_wrapper_random(list_of_tuples):
    # the loader's collate: ids of each feature flattened, offsets the running lengths
    dense, sparse, y = zip(*list_of_tuples)
    X_int = torch.tensor(np.stack(dense))
    lS_i, lS_o = [], []
    for k in range(len(sparse[0])):
        ids = [s[k] for s in sparse]
        lengths = torch.tensor([len(v) for v in ids])
        lS_o.append(torch.cumsum(lengths, 0) - lengths)   # exclusive prefix sums
        lS_i.append(torch.tensor(np.concatenate(ids), dtype=torch.long))
    T = torch.tensor(np.array(y)).view(-1, 1)
    return X_int, torch.stack(lS_o), lS_i, T


ln_emb = np.array([40, 25, 60])
m_den, m_spa = 5, 8
LOSSES = []
for triu in (False, True):
    dlrm = DLRM_Net(m_spa, ln_emb, np.array([m_den, 16, m_spa]),
                    np.array([m_spa + 6, 16, 8, 1]), modes=["sum", "mean", "sum"], triu=triu)
    sync(dlrm)
    model = comp(dlrm)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="mean")
    optimizer = torch.optim.SGD(dlrm.parameters(), lr=0.1)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 if step < 3 else 0.5)
    train_data = RandomClickDataset(48, ln_emb, m_den, max_ids=4, seed=1 + triu)
    train_ld = DataLoader(train_data, batch_size=16, shuffle=False, collate_fn=collate_wrapper_random, drop_last=False)
    for k in range(2):
        for j, (X, lS_o, lS_i, T) in enumerate(train_ld):
            Z = model(X, lS_o, lS_i)
            E = loss_fn(Z, T)
            optimizer.zero_grad()
            E.backward()
            optimizer.step()
            lr_scheduler.step()
            L = E.detach().cpu().numpy()
            S = torch.sigmoid(Z).detach().cpu().numpy()
            A = np.sum((np.round(S, 0) == T.cpu().numpy()).astype(np.uint8))
            LOSSES += [float(L), float(A) / T.shape[0]]
    with torch.no_grad():
        X, lS_o, lS_i, T = next(iter(train_ld))
        LOSSES.append(torch.sigmoid(model(X, lS_o, lS_i)).mean().item())
    LOSSES.append(dlrm.emb_l[1].weight.norm().item())
