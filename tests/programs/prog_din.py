from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Deep Interest Network (Zhou et al.; DeepCTR-Torch style): a candidate item (item id and
# category embeddings concatenated) attends over the user's padded behaviour sequence by a
# local activation unit (an MLP on [q, k, q - k, q * k] with Dice activations: BatchNorm
# without affine then a learned mix of x and sigmoid-gated x, 3-D inputs by transposes),
# the padding masked by arange < lengths and torch.where, the scores left unnormalised as the
# paper's; the pooled interest beside user-profile and context features into an MLP with
# Dice; BCEWithLogits, Adam with an L2 term on the looked-up embeddings; AUC by ranks, GAUC
class Dice(nn.Module):
    def __init__(self, emb_size, dim=2, epsilon=1e-8):
        super().__init__()
        assert dim in (2, 3)
        self.bn = nn.BatchNorm1d(emb_size, eps=epsilon, affine=False)
        self.sigmoid = nn.Sigmoid()
        self.dim = dim
        self.alpha = nn.Parameter(torch.zeros((emb_size,)) if dim == 2 else torch.zeros((emb_size, 1)))
    def forward(self, x):
        assert x.dim() == self.dim
        if self.dim == 2:
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
        else:
            x = torch.transpose(x, 1, 2)
            x_p = self.sigmoid(self.bn(x))
            out = self.alpha * (1 - x_p) * x + x_p * x
            out = torch.transpose(out, 1, 2)
        return out
class LocalActivationUnit(nn.Module):
    def __init__(self, hidden_units=(32, 16), embedding_dim=8):
        super().__init__()
        layers, d = [], 4 * embedding_dim
        for h in hidden_units:
            layers += [nn.Linear(d, h), Dice(h, dim=3)]
            d = h
        self.dnn = nn.Sequential(*layers)
        self.dense = nn.Linear(d, 1)
    def forward(self, query, user_behavior):
        user_behavior_len = user_behavior.size(1)
        queries = query.expand(-1, user_behavior_len, -1)
        attention_input = torch.cat([queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1)
        return self.dense(self.dnn(attention_input))      # (B, T, 1)
class AttentionSequencePoolingLayer(nn.Module):
    def __init__(self, embedding_dim, weight_normalization=False):
        super().__init__()
        self.local_att = LocalActivationUnit(embedding_dim=embedding_dim)
        self.weight_normalization = weight_normalization
    def forward(self, query, keys, keys_length):
        batch_size, max_length, _ = keys.size()
        keys_masks = torch.arange(max_length, dtype=keys_length.dtype).repeat(batch_size, 1)
        keys_masks = keys_masks < keys_length.view(-1, 1)
        keys_masks = keys_masks.unsqueeze(1)                 # (B, 1, T)
        outputs = torch.transpose(self.local_att(query, keys), 1, 2)
        if self.weight_normalization:
            paddings = torch.ones_like(outputs) * (-2 ** 32 + 1)
        else:
            paddings = torch.zeros_like(outputs)
        outputs = torch.where(keys_masks, outputs, paddings)
        if self.weight_normalization:
            outputs = F.softmax(outputs, dim=-1)
        return torch.matmul(outputs, keys)                   # (B, 1, E)
class DIN(nn.Module):
    def __init__(self, n_items=60, n_cats=8, n_users=20, n_ctx=5, d=4, dnn_hidden=(32, 16)):
        super().__init__()
        self.item_emb = nn.Embedding(n_items + 1, d, padding_idx=0)
        self.cat_emb = nn.Embedding(n_cats + 1, d, padding_idx=0)
        self.user_emb = nn.Embedding(n_users, d)
        self.ctx_emb = nn.Embedding(n_ctx, d)
        for e in (self.item_emb, self.cat_emb, self.user_emb, self.ctx_emb):
            nn.init.normal_(e.weight, std=1e-2)
        self.attention = AttentionSequencePoolingLayer(2 * d)
        layers, width = [], 2 * d + 2 * d + 2 * d + 1
        for h in dnn_hidden:
            layers += [nn.Linear(width, h), Dice(h)]
            width = h
        self.dnn = nn.Sequential(*layers)
        self.out = nn.Linear(width, 1)
    def forward(self, user, ctx, dense, item, cat, hist_item, hist_cat, hist_len):
        query = torch.cat([self.item_emb(item), self.cat_emb(cat)], -1).unsqueeze(1)
        keys = torch.cat([self.item_emb(hist_item), self.cat_emb(hist_cat)], -1)
        interest = self.attention(query, keys, hist_len).squeeze(1)
        profile = torch.cat([self.user_emb(user), self.ctx_emb(ctx)], -1)
        x = torch.cat([profile, interest, query.squeeze(1), dense.unsqueeze(-1)], dim=-1)
        logit = self.out(self.dnn(x)).squeeze(-1)
        reg = sum(torch.sum(e ** 2) for e in (query, keys, profile)) / item.size(0)
        return logit, reg
def auc(y, p):
    order = np.argsort(p, kind="stable"); ranks = np.empty(len(p)); ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1; n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(n_pos * n_neg, 1)
r = np.random.default_rng(0)
N, T = 192, 10
item_cat = r.integers(1, 9, size=61); item_cat[0] = 0
user_pref = r.integers(1, 9, size=20)
def make(n):
    user = r.integers(0, 20, n); lengths = r.integers(1, T + 1, n)
    hist = r.integers(1, 61, (n, T)) * (np.arange(T)[None] < lengths[:, None])
    item = r.integers(1, 61, n)
    y = ((item_cat[item] == user_pref[user]) | (r.random(n) < 0.2)).astype(np.float32)
    return dict(user=torch.from_numpy(user), ctx=torch.from_numpy(r.integers(0, 5, n)),
                dense=torch.from_numpy(r.standard_normal(n).astype(np.float32)),
                item=torch.from_numpy(item), cat=torch.from_numpy(item_cat[item]),
                hist_item=torch.from_numpy(hist), hist_cat=torch.from_numpy(item_cat[hist]),
                hist_len=torch.from_numpy(lengths)), torch.from_numpy(y)
train, y_train = make(N); test, y_test = make(64)
model = DIN(); sync(model)
fwd = comp(model, fullgraph=True)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
loss_fn = nn.BCEWithLogitsLoss()
LOSSES = []
for epoch in range(2):
    model.train()
    for s in range(0, N, 64):
        batch = {k: v[s:s + 64] for k, v in train.items()}
        logit, reg = fwd(**batch)
        loss = loss_fn(logit, y_train[s:s + 64]) + 1e-4 * reg
        opt.zero_grad(); loss.backward(); opt.step()
        LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    logit, _ = fwd(**test)
    p = torch.sigmoid(logit).numpy(); y = y_test.numpy(); users = test["user"].numpy()
    gauc = [auc(y[users == u], p[users == u]) for u in np.unique(users) if 0 < y[users == u].mean() < 1]
    LOSSES += [loss_fn(logit, y_test).item(), auc(y, p), float(np.mean(gauc))]
