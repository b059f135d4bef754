from _harness import sync, comp  # the runner: weights shared with the PyTorch run; torch.compile
import numpy as np, torch, torch.nn as nn
# CTR models on tabular click data (DCN-V2 and DeepFM; DeepCTR-Torch / torchrec style): each
# sparse field a multi-hot bag through nn.EmbeddingBag(mode="sum", offsets, per_sample_weights),
# dense features concatenated; DCN-V2's cross network x_{l+1} = x0 * (W x_l + b) + x_l (full
# and low-rank "mixture" forms) beside a deep MLP; DeepFM's first-order weights and
# second-order term 0.5 * (sum^2 - sum of squares); BCEWithLogits, Adagrad for the embedding
# tables and Adam for the rest (two optimizers, two param groups of weight decay); AUC by ranks
torch.manual_seed(0)


class SparseFeatures(nn.Module):
    """one EmbeddingBag per field; each field's ids of a batch flattened with offsets"""

    def __init__(self, vocab_sizes, dim):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(v, dim, mode="sum") for v in vocab_sizes])
        for b in self.bags:
            nn.init.normal_(b.weight, std=0.05)

    def forward(self, ids, offsets, weights):
        return torch.stack([bag(i, o, per_sample_weights=w) for bag, i, o, w in zip(self.bags, ids, offsets, weights)], 1)


class CrossNetV2(nn.Module):
    def __init__(self, in_features, layer_num=2, low_rank=None):
        super().__init__()
        self.layer_num = layer_num
        if low_rank is None:
            self.kernels = nn.ParameterList([nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, in_features)))
                                             for _ in range(layer_num)])
        else:
            self.U = nn.ParameterList([nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, low_rank)))
                                       for _ in range(layer_num)])
            self.V = nn.ParameterList([nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, low_rank)))
                                       for _ in range(layer_num)])
        self.low_rank = low_rank
        self.bias = nn.ParameterList([nn.Parameter(nn.init.zeros_(torch.empty(in_features, 1))) for _ in range(layer_num)])

    def forward(self, inputs):
        x_0 = inputs.unsqueeze(2)
        x_l = x_0
        for i in range(self.layer_num):
            if self.low_rank is None:
                xl_w = torch.matmul(self.kernels[i], x_l)  # W * xi  (bs, in_features, 1)
            else:
                v_x = torch.matmul(self.V[i].t(), x_l)
                v_x = torch.tanh(v_x)
                xl_w = torch.matmul(self.U[i], v_x)
            dot_ = xl_w + self.bias[i]  # W * xi + b
            x_l = x_0 * dot_ + x_l  # x0 · (W * xi + b) +xl  Hadamard-product
        x_l = torch.squeeze(x_l, dim=2)
        return x_l


def dnn(sizes, dropout=0.0):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b, bias=False), nn.BatchNorm1d(b), nn.ReLU(), nn.Dropout(dropout)]   # BN has the bias
    return nn.Sequential(*layers)


class DCNv2(nn.Module):
    def __init__(self, vocab_sizes, n_dense, dim=8, low_rank=None):
        super().__init__()
        self.embedding = SparseFeatures(vocab_sizes, dim)
        d_in = len(vocab_sizes) * dim + n_dense
        self.cross = CrossNetV2(d_in, 2, low_rank)
        self.deep = dnn([d_in, 32, 16])
        self.out = nn.Linear(d_in + 16, 1, bias=False)

    def forward(self, dense, ids, offsets, weights):
        emb = self.embedding(ids, offsets, weights)
        x = torch.cat([torch.flatten(emb, start_dim=1), dense], dim=-1)
        stack = torch.cat([self.cross(x), self.deep(x)], dim=-1)
        return self.out(stack).squeeze(-1)


class FM(nn.Module):
    def forward(self, inputs):
        fm_input = inputs
        square_of_sum = torch.pow(torch.sum(fm_input, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(fm_input * fm_input, dim=1, keepdim=True)
        cross_term = square_of_sum - sum_of_square
        cross_term = 0.5 * torch.sum(cross_term, dim=2, keepdim=False)
        return cross_term


class DeepFM(nn.Module):
    def __init__(self, vocab_sizes, n_dense, dim=8):
        super().__init__()
        self.embedding = SparseFeatures(vocab_sizes, dim)
        self.linear_sparse = SparseFeatures(vocab_sizes, 1)     # first-order weights
        self.linear_dense = nn.Linear(n_dense, 1)
        self.fm = FM()
        self.dnn = dnn([len(vocab_sizes) * dim + n_dense, 32, 32])
        self.dnn_linear = nn.Linear(32, 1, bias=False)

    def forward(self, dense, ids, offsets, weights):
        emb = self.embedding(ids, offsets, weights)                   # (B, fields, dim)
        logit = self.linear_sparse(ids, offsets, weights).sum(1) + self.linear_dense(dense)
        logit = logit + self.fm(emb)
        dnn_input = torch.cat([emb.flatten(1), dense], 1)
        logit = logit + self.dnn_linear(self.dnn(dnn_input))
        return logit.squeeze(-1)


def auc(y, p):
    order = np.argsort(p, kind="stable")
    ranks = np.empty(len(p)); ranks[order] = np.arange(1, len(p) + 1)
    npos = y.sum()
    return (ranks[y == 1].sum() - npos * (npos + 1) / 2) / (npos * (len(y) - npos))


r = np.random.default_rng(0)
vocab, n_dense, B = [30, 50, 20, 40], 5, 64
true_w = [r.standard_normal(v) for v in vocab]


def batch():
    dense = r.standard_normal((B, n_dense)).astype(np.float32)
    ids, offsets, weights, score = [], [], [], dense[:, 0] * 0.5
    for f, v in enumerate(vocab):
        lens = r.integers(1, 4, B)
        i = r.integers(0, v, lens.sum())
        w = r.uniform(0.5, 1.5, lens.sum()).astype(np.float32)
        off = np.concatenate([[0], np.cumsum(lens)[:-1]])
        score = score + np.add.reduceat(true_w[f][i] * w, off)
        ids.append(torch.from_numpy(i)); offsets.append(torch.from_numpy(off)); weights.append(torch.from_numpy(w))
    label = (score + 0.3 * r.standard_normal(B) > 0).astype(np.float32)
    return torch.from_numpy(dense), ids, offsets, weights, torch.from_numpy(label)


LOSSES = []
for Model, kw in ((DCNv2, {}), (DCNv2, {"low_rank": 4}), (DeepFM, {})):
    model = Model(vocab, n_dense, **kw)
    sync(model)
    net = comp(model)
    emb_params = [p for n, p in model.named_parameters() if "bags" in n]
    other = [p for n, p in model.named_parameters() if "bags" not in n]
    decay = [p for p in other if p.dim() > 1]
    no_decay = [p for p in other if p.dim() <= 1]
    opt_sparse = torch.optim.Adagrad(emb_params, lr=0.05, initial_accumulator_value=1e-8)
    opt_dense = torch.optim.Adam([{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}], lr=2e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    for step in range(3):
        dense, ids, offsets, weights, label = batch()
        logits = net(dense, ids, offsets, weights)
        loss = loss_fn(logits, label)
        opt_sparse.zero_grad(); opt_dense.zero_grad()
        loss.backward()
        opt_sparse.step(); opt_dense.step()
        LOSSES.append(loss.item())
    model.eval()
    with torch.no_grad():
        dense, ids, offsets, weights, label = batch()
        p = torch.sigmoid(net(dense, ids, offsets, weights))
        LOSSES += [loss_fn(torch.logit(p, eps=1e-6), label).item(), auc(label.numpy(), p.numpy())]
