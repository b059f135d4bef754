from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# TabTransformer (tab-transformer-pytorch): categorical columns looked up in one shared
# table at per-column offsets (F.pad + cumsum of the cardinalities, a buffer), a special
# "missing" id per column, a learned column embedding concatenated to each value's
# (repeat over the batch), a pre-norm Transformer of einsum attention over the columns;
# continuous columns with NaNs imputed by nan_to_num and an isnan indicator, normalized by
# buffers of the training means and stds, LayerNorm; an MLP head; BCEWithLogitsLoss with
# pos_weight; a DataLoader over a TensorDataset (its last batch smaller; the rows shuffled
# by numpy, as the frameworks' generators differ), compiled with dynamic=True and
# fullgraph=True; Adam with a StepLR, AUC by ranks in eval
CATEGORIES, NUM_CONT, DIM = (3, 5, 4, 6), 3, 8
class Attention(nn.Module):
    def __init__(self, dim, heads=2, dim_head=4):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
    def forward(self, x):
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2) for t in (q, k, v))
        sim = torch.einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = sim.softmax(dim=-1)
        out = torch.einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out), attn
class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)
class Transformer(nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([
            nn.LayerNorm(dim), Attention(dim),
            nn.LayerNorm(dim), nn.Sequential(nn.Linear(dim, dim * 4 * 2), GEGLU(), nn.Linear(dim * 4, dim))])
            for _ in range(depth)])
    def forward(self, x, return_attn=False):
        post_softmax_attns = []
        for ln1, attn, ln2, ff in self.layers:
            attn_out, post_softmax_attn = attn(ln1(x))
            post_softmax_attns.append(post_softmax_attn)
            x = attn_out + x
            x = ff(ln2(x)) + x
        return (x, torch.stack(post_softmax_attns)) if return_attn else x
class TabTransformer(nn.Module):
    def __init__(self, categories, num_continuous, dim, depth=2, column_dim=2, num_special_tokens=1):
        super().__init__()
        self.num_categories, self.num_unique_categories = len(categories), sum(categories)
        self.num_special_tokens = num_special_tokens
        total_tokens = self.num_unique_categories + num_special_tokens
        categories_offset = F.pad(torch.tensor(list(categories)), (1, 0), value=num_special_tokens)
        categories_offset = categories_offset.cumsum(dim=-1)[:-1]
        self.register_buffer('categories_offset', categories_offset)
        self.category_embed = nn.Embedding(total_tokens, dim - column_dim)
        self.column_embed = nn.Parameter(torch.randn(self.num_categories, column_dim))
        self.transformer = Transformer(dim, depth)
        self.num_continuous = num_continuous
        self.register_buffer('cont_mean', torch.zeros(num_continuous))
        self.register_buffer('cont_std', torch.ones(num_continuous))
        self.norm = nn.LayerNorm(2 * num_continuous)
        input_size = dim * self.num_categories + 2 * num_continuous
        self.mlp = nn.Sequential(nn.Linear(input_size, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))
    def forward(self, x_categ, x_cont, return_attn=False):
        assert x_categ.shape[-1] == self.num_categories, f'you must pass in {self.num_categories} values'
        missing = x_categ < 0
        x_categ = torch.where(missing, torch.zeros_like(x_categ), x_categ + self.categories_offset)
        x = self.category_embed(x_categ)
        cols = self.column_embed.unsqueeze(0).repeat(x.shape[0], 1, 1)
        x = torch.cat((x, cols), dim=-1)
        x, attns = self.transformer(x, return_attn=True)
        flat_categ = x.flatten(1)
        isnan = torch.isnan(x_cont)
        x_cont = (torch.nan_to_num(x_cont, nan=0.0) - self.cont_mean) / self.cont_std
        x_cont = x_cont.masked_fill(isnan, 0.0)
        normed_cont = self.norm(torch.cat((x_cont, isnan.float()), dim=-1))
        logits = self.mlp(torch.cat((flat_categ, normed_cont), dim=-1))
        return (logits, attns) if return_attn else logits
def make_data(r, n):
    cat = np.stack([r.integers(0, c, n) for c in CATEGORIES], 1)
    cat[r.random(cat.shape) < 0.1] = -1                      # missing categories
    cont = r.standard_normal((n, NUM_CONT)).astype(np.float32) * [1.0, 3.0, 0.5] + [0.0, 2.0, -1.0]
    score = (cat[:, 0] == 1) + 0.5 * (cat[:, 2] >= 2) + cont[:, 0] - 0.2 * cont[:, 1]
    y = (score > 0.8).astype(np.float32)
    cont[r.random(cont.shape) < 0.15] = np.nan
    return torch.from_numpy(cat), torch.from_numpy(cont.astype(np.float32)), torch.from_numpy(y)
r = np.random.default_rng(0)
cat, cont, y = make_data(r, 44)
model = TabTransformer(CATEGORIES, NUM_CONT, DIM)
model.cont_mean.copy_(torch.nanmean(cont, dim=0))
model.cont_std.copy_(torch.from_numpy(np.nanstd(cont.numpy(), axis=0)))
sync(model)
net = comp(model, fullgraph=True, dynamic=True)
pos_weight = (y == 0).sum() / (y == 1).sum()
criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
order = torch.from_numpy(r.permutation(len(y)))
loader = DataLoader(TensorDataset(cat[order], cont[order], y[order]), batch_size=16)
LOSSES = []
for epoch in range(1):
    for xc, xn, t in loader:
        logits = net(xc, xn).squeeze(-1)
        loss = criterion(logits, t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
    scheduler.step()
model.eval()
with torch.no_grad():
    cat_t, cont_t, y_t = make_data(r, 12)
    logits, attns = net(cat_t, cont_t, return_attn=True)
    scores = logits.squeeze(-1)
    ranks = scores.argsort().argsort().float() + 1
    n_pos = y_t.sum()
    auc = (ranks[y_t == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (len(y_t) - n_pos))
    LOSSES += [auc.item()] + scores.tolist() + attns[:, 0, 0, 0].flatten().tolist()
