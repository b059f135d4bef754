from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
# FT-Transformer (rtdl's layers) on a synthetic tabular regression + classification task:
# numerical features by piecewise-linear encoding (bin edges from torch.quantile over the
# training set, bins found by torch.bucketize, the position inside a bin by gathered edges,
# clamps keeping the first and last bins open), a feature tokenizer (per-feature weights
# and biases; categorical embeddings at per-column offsets from a cumsum buffer), a [CLS]
# token appended by expand, pre-norm blocks without the first block's attention norm,
# ReGLU feed-forward, the last block attending from the [CLS] query only, AdamW with
# no weight decay on norms, biases and tokenizers, a DataLoader over a TensorDataset, and
# evaluation by torch.inference_mode
class PiecewiseLinearEncoding(nn.Module):
    def __init__(self, bins):   # bins: list of 1-D edge tensors, one per feature
        super().__init__()
        self.n_bins = max(len(b) for b in bins) - 1
        edges = torch.stack([F.pad(b, (0, self.n_bins + 1 - len(b)), value=math.inf) for b in bins])
        self.register_buffer('edges', edges)
        self.register_buffer('n_feature_bins', torch.tensor([len(b) - 1 for b in bins]))
    def forward(self, x):   # B, F -> B, F, n_bins
        idx = torch.stack([torch.bucketize(x[:, i].contiguous(), self.edges[i, 1:-1].contiguous(), right=True)
                           for i in range(x.shape[1])], 1)
        left = self.edges.gather(1, idx.t()).t()
        right = self.edges.gather(1, (idx + 1).t()).t()
        frac = (x - left) / (right - left)
        ar = torch.arange(self.n_bins, device=x.device)
        enc = torch.where(ar < idx[..., None], torch.ones_like(frac[..., None]), torch.zeros_like(frac[..., None]))
        enc = torch.where(ar == idx[..., None], frac[..., None], enc)
        first = enc[..., :1].clamp(max=1.0)
        last = enc[..., -1:].clamp(min=0.0)
        mid = enc[..., 1:-1].clamp(0.0, 1.0)
        enc = torch.cat([first, mid, last], -1)
        return enc.masked_fill(ar >= self.n_feature_bins[:, None], 0.0)
class FeatureTokenizer(nn.Module):
    def __init__(self, n_num, n_bins, cardinalities, d_token):
        super().__init__()
        self.num_weight = nn.Parameter(torch.empty(n_num, n_bins, d_token))
        self.num_bias = nn.Parameter(torch.empty(n_num, d_token))
        category_offsets = torch.tensor([0] + cardinalities[:-1]).cumsum(0)
        self.register_buffer('category_offsets', category_offsets, persistent=False)
        self.category_embeddings = nn.Embedding(sum(cardinalities), d_token)
        self.cat_bias = nn.Parameter(torch.empty(len(cardinalities), d_token))
        self.cls = nn.Parameter(torch.empty(d_token))
        d_rsqrt = d_token ** -0.5
        for p in (self.num_weight, self.num_bias, self.cat_bias, self.cls):
            nn.init.uniform_(p, -d_rsqrt, d_rsqrt)
        nn.init.kaiming_uniform_(self.category_embeddings.weight, a=math.sqrt(5))
    def forward(self, x_ple, x_cat):
        x_num = torch.einsum('bfk,fkd->bfd', x_ple, self.num_weight) + self.num_bias[None]
        x_cat = self.category_embeddings(x_cat + self.category_offsets[None]) + self.cat_bias[None]
        x = torch.cat([x_num, x_cat], dim=1)
        return torch.cat([x, self.cls.expand(len(x), 1, -1)], dim=1)
class ReGLU(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a * F.relu(b)
class Block(nn.Module):
    def __init__(self, d, n_heads, d_ffn, first, last):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, n_heads, dropout=0.0, batch_first=True)
        self.attention_normalization = nn.Identity() if first else nn.LayerNorm(d)
        self.ffn_normalization = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d_ffn), ReGLU(), nn.Dropout(0.0), nn.Linear(d_ffn, d))
        self.last = last
    def forward(self, x):
        x_residual = self.attention_normalization(x)
        q = x_residual[:, -1:] if self.last else x_residual
        x_residual, _ = self.attention(q, x_residual, x_residual, need_weights=False)
        x = (x[:, -1:] if self.last else x) + x_residual
        return x + self.ffn(self.ffn_normalization(x))
class FTTransformer(nn.Module):
    def __init__(self, bins, cardinalities, d_token=16, n_blocks=2, n_heads=4, d_out=3):
        super().__init__()
        self.ple = PiecewiseLinearEncoding(bins)
        self.tokenizer = FeatureTokenizer(len(bins), self.ple.n_bins, cardinalities, d_token)
        self.blocks = nn.ModuleList([Block(d_token, n_heads, d_token * 4 // 3, i == 0, i == n_blocks - 1)
                                     for i in range(n_blocks)])
        self.head = nn.Sequential(nn.LayerNorm(d_token), nn.ReLU(), nn.Linear(d_token, d_out))
    def forward(self, x_num, x_cat):
        x = self.tokenizer(self.ple(x_num), x_cat)
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, -1])
rng = np.random.default_rng(0)
N, cards = 256, [3, 5, 4]
X_num = rng.standard_normal((N, 4)).astype(np.float32); X_num[:, 3] = np.round(X_num[:, 3])
X_cat = np.stack([rng.integers(0, c, N) for c in cards], 1)
y_reg = (np.sin(X_num[:, 0]) + X_num[:, 1] * (X_cat[:, 0] == 1) + 0.1 * rng.standard_normal(N)).astype(np.float32)
y_cls = (X_num[:, 2] + X_cat[:, 1] > 2).astype(np.int64)
X_num_t, X_cat_t = torch.from_numpy(X_num), torch.from_numpy(X_cat)
qs = torch.linspace(0, 1, 7)
bins = [torch.unique(torch.quantile(X_num_t[:192, i], qs, interpolation="nearest")) for i in range(4)]
model = FTTransformer(bins, cards); sync(model)
net = comp(model, fullgraph=True, dynamic=True)
no_wd = [p for n, p in model.named_parameters() if 'normalization' in n or n.endswith('bias')
         or 'tokenizer' in n or 'head.0' in n]
wd = [p for n, p in model.named_parameters() if all(p is not q for q in no_wd)]
opt = torch.optim.AdamW([{'params': wd, 'weight_decay': 1e-4}, {'params': no_wd, 'weight_decay': 0.0}], lr=3e-3)
loader = DataLoader(TensorDataset(X_num_t[:192], X_cat_t[:192], torch.from_numpy(y_reg[:192]),
                                  torch.from_numpy(y_cls[:192])), batch_size=64, shuffle=False)
LOSSES = [float(b.numel()) for b in bins]
for epoch in range(2):
    model.train()
    for xn, xc, yr, yc in loader:
        out = net(xn, xc)
        loss = F.mse_loss(out[:, 0], yr) + F.cross_entropy(out[:, 1:], yc)
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        LOSSES.append(loss.item())
    model.eval()
    with torch.inference_mode():
        out = net(X_num_t[192:], X_cat_t[192:])
        rmse = (out[:, 0] - torch.from_numpy(y_reg[192:])).pow(2).mean().sqrt()
        acc = (out[:, 1:].argmax(1) == torch.from_numpy(y_cls[192:])).float().mean()
    LOSSES += [rmse.item(), acc.item()]
