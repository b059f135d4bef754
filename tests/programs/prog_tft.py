from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# Temporal Fusion Transformer (Lim et al. 2021) at toy size, pytorch-forecasting's parts:
# gated residual networks with GLU gates, variable selection by softmax weights over
# per-variable GRNs, an LSTM encoder-decoder seeded from a static context, interpretable
# multi-head attention (one shared value projection, heads averaged) under a causal mask,
# and the quantile (pinball) loss; static categoricals come in through nn.Embedding.
class GLU(nn.Module):
    def __init__(self, d_in, d):
        super().__init__()
        self.fc = nn.Linear(d_in, 2 * d)
    def forward(self, x):
        return F.glu(self.fc(x), dim=-1)

class GRN(nn.Module):
    def __init__(self, d_in, d, d_out=None, d_ctx=None):
        super().__init__()
        d_out = d_out or d
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else None
        self.fc1, self.fc2 = nn.Linear(d_in, d), nn.Linear(d, d)
        self.ctx = nn.Linear(d_ctx, d, bias=False) if d_ctx else None
        self.gate = GLU(d, d_out)
        self.norm = nn.LayerNorm(d_out)
    def forward(self, x, c=None):
        residual = self.skip(x) if self.skip is not None else x
        h = self.fc1(x)
        if c is not None:
            h = h + self.ctx(c)
        h = self.fc2(F.elu(h))
        return self.norm(self.gate(h) + residual)

class VariableSelection(nn.Module):
    def __init__(self, n_vars, d, d_ctx=None):
        super().__init__()
        self.prescalers = nn.ModuleList([nn.Linear(1, d) for _ in range(n_vars)])
        self.var_grns = nn.ModuleList([GRN(d, d) for _ in range(n_vars)])
        self.flat_grn = GRN(n_vars * d, d, n_vars, d_ctx)
    def forward(self, x, c=None):   # x: B, T, n_vars
        emb = [pre(x[..., i:i + 1]) for i, pre in enumerate(self.prescalers)]
        weights = self.flat_grn(torch.cat(emb, -1), c).softmax(-1).unsqueeze(-2)   # B, T, 1, n
        var_out = torch.stack([g(e) for g, e in zip(self.var_grns, emb)], -1)       # B, T, d, n
        return (var_out * weights).sum(-1), weights.squeeze(-2)

class InterpretableMHA(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.q = nn.ModuleList([nn.Linear(d, self.dk) for _ in range(heads)])
        self.k = nn.ModuleList([nn.Linear(d, self.dk) for _ in range(heads)])
        self.v = nn.Linear(d, self.dk)
        self.out = nn.Linear(self.dk, d)
    def forward(self, q, k, v, mask):
        vs = self.v(v)
        heads, attns = [], []
        for i in range(self.heads):
            s = torch.bmm(self.q[i](q), self.k[i](k).permute(0, 2, 1)) / self.dk ** 0.5
            a = s.masked_fill(mask, -1e9).softmax(-1)
            heads.append(torch.bmm(a, vs)); attns.append(a)
        return self.out(torch.stack(heads, 2).mean(2)), torch.stack(attns, 2)

class TFT(nn.Module):
    def __init__(self, n_enc_vars=3, n_dec_vars=2, n_static_cat=5, d=16, heads=2, quantiles=(0.1, 0.5, 0.9)):
        super().__init__()
        self.static_emb = nn.Embedding(n_static_cat, d)
        self.static_ctx = nn.ModuleDict({k: GRN(d, d) for k in ("select", "h", "c", "enrich")})
        self.enc_vs, self.dec_vs = VariableSelection(n_enc_vars, d, d), VariableSelection(n_dec_vars, d, d)
        self.lstm_enc = nn.LSTM(d, d, batch_first=True)
        self.lstm_dec = nn.LSTM(d, d, batch_first=True)
        self.post_lstm = GLU(d, d); self.post_lstm_norm = nn.LayerNorm(d)
        self.enrich = GRN(d, d, d_ctx=d)
        self.attn = InterpretableMHA(d, heads)
        self.post_attn = GLU(d, d); self.post_attn_norm = nn.LayerNorm(d)
        self.pos_wise = GRN(d, d)
        self.out = nn.Linear(d, len(quantiles))
    def forward(self, x_enc, x_dec, static):
        s = self.static_emb(static)
        cs, ch, cc, ce = (self.static_ctx[k](s) for k in ("select", "h", "c", "enrich"))
        T_enc, T_dec = x_enc.size(1), x_dec.size(1)
        e, enc_w = self.enc_vs(x_enc, cs[:, None].expand(-1, T_enc, -1))
        d, _ = self.dec_vs(x_dec, cs[:, None].expand(-1, T_dec, -1))
        h_enc, state = self.lstm_enc(e, (ch[None], cc[None]))
        h_dec, _ = self.lstm_dec(d, state)
        lstm_in, lstm_out = torch.cat([e, d], 1), torch.cat([h_enc, h_dec], 1)
        temporal = self.post_lstm_norm(self.post_lstm(lstm_out) + lstm_in)
        enriched = self.enrich(temporal, ce[:, None].expand(-1, T_enc + T_dec, -1))
        T = T_enc + T_dec
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)[T_enc:]
        a, attn = self.attn(enriched[:, T_enc:], enriched, enriched, mask.expand(x_enc.size(0), -1, -1))
        a = self.post_attn_norm(self.post_attn(a) + enriched[:, T_enc:])
        return self.out(self.pos_wise(a)), enc_w, attn

def quantile_loss(pred, y, quantiles=(0.1, 0.5, 0.9)):
    losses = []
    for i, q in enumerate(quantiles):
        err = y - pred[..., i]
        losses.append(torch.max((q - 1) * err, q * err).unsqueeze(-1))
    return torch.cat(losses, -1).sum(-1).mean()

model = TFT(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
t = np.arange(16)
for step in range(5):
    phase = rng.random((8, 1)) * 6
    series = np.sin(t[None] / 2 + phase) + 0.1 * rng.standard_normal((8, 16))
    cov = np.stack([series, np.cos(t[None] / 2 + phase), np.broadcast_to(t / 16, (8, 16))], -1).astype(np.float32)
    x_enc = torch.from_numpy(cov[:, :12]); x_dec = torch.from_numpy(cov[:, 12:, 1:].copy())
    y = torch.from_numpy(series[:, 12:].astype(np.float32)); static = torch.from_numpy(rng.integers(0, 5, 8))
    pred, enc_w, attn = net(x_enc, x_dec, static)
    loss = quantile_loss(pred, y)
    opt.zero_grad(); loss.backward(); nn.utils.clip_grad_norm_(model.parameters(), 0.1); opt.step()
    LOSSES += [loss.item(), enc_w.mean((0, 1))[0].item(), attn[:, -1, :, :12].sum().item()]
