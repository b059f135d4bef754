from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.distributions import NegativeBinomial
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
# DeepAR (Salinas et al.; the gluonts/pytorch-forecasting recipe) on synthetic count series:
# per-series scale from the context window's mean (+1), lagged targets gathered by index
# lists, calendar features, an item embedding, a 2-layer batch_first LSTM run over the
# context and then step by step with its (h, c) state, a NegativeBinomial likelihood
# (mu and the dispersion alpha by softplus; total_count = 1/alpha, logits = log(alpha mu)),
# training on the context + horizon window by teacher forcing, Adam with a StepLR and
# clip_grad_norm_, and forecasting under torch.no_grad by feeding the distribution's mean
# back as the next input (the ancestral path with its draws replaced by means, so that the
# frameworks' random streams do not enter), scored by log_prob of the held-out counts
LAGS = [1, 2, 7]
CONTEXT, HORIZON, N_SERIES, T_TOTAL = 14, 7, 12, 84
class SeriesWindows(Dataset):
    def __init__(self, counts, starts):
        self.counts, self.items = counts, [(s, t) for s in range(len(counts)) for t in starts]
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        s, t = self.items[i]
        lo = t - max(LAGS)
        return torch.tensor(s), torch.from_numpy(self.counts[s, lo:t + CONTEXT + HORIZON]), torch.tensor(t)
def time_features(t0, length):
    t = torch.arange(length, dtype=torch.float32) + t0[:, None].float()
    return torch.stack([torch.sin(2 * np.pi * t / 7), torch.cos(2 * np.pi * t / 7), t / T_TOTAL - 0.5], -1)
class DeepAR(nn.Module):
    def __init__(self, n_series, emb=4, hidden=24, layers=2):
        super().__init__()
        self.embedding = nn.Embedding(n_series, emb)
        self.rnn = nn.LSTM(len(LAGS) + 3 + emb + 1, hidden, layers, batch_first=True)
        self.mu = nn.Linear(hidden, 1)
        self.alpha = nn.Linear(hidden, 1)
    def forward(self, lagged, feats, series, log_scale, state=None):
        # lagged: B, T, len(LAGS) (already scaled); feats: B, T, 3
        emb = self.embedding(series)[:, None].expand(-1, lagged.shape[1], -1)
        x = torch.cat([lagged, feats, emb, log_scale[:, None, None].expand(-1, lagged.shape[1], 1)], -1)
        out, state = self.rnn(x, state)
        mu = F.softplus(self.mu(out)).squeeze(-1)
        alpha = F.softplus(self.alpha(out)).squeeze(-1) + 1e-4
        return mu, alpha, state
def negbin(mu, alpha, scale):
    mu = mu * scale[:, None]
    alpha = alpha / scale[:, None].sqrt()
    return NegativeBinomial(total_count=1.0 / alpha, logits=torch.log(alpha * mu))
def lags_of(window, scale, start, length):
    # window[:, start - l + i] for each lag l: the target l steps before position start + i
    idx = torch.arange(length)[None, :] + start - torch.tensor(LAGS)[:, None]
    return (window[:, idx].permute(0, 2, 1) / scale[:, None, None])
rng = np.random.default_rng(0)
t = np.arange(T_TOTAL)
level = rng.uniform(3, 30, (N_SERIES, 1))
rate = level * (1 + 0.5 * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 6, (N_SERIES, 1)))) * (1 + t / 200)
counts = rng.poisson(rate).astype(np.float32)
model = DeepAR(N_SERIES); sync(model)
net = comp(model)
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
loader = DataLoader(SeriesWindows(counts, [10, 24, 38]), batch_size=12, shuffle=False)
LOSSES = []
for epoch in range(2):
    model.train()
    for series, window, t0 in loader:
        m = max(LAGS)
        scale = window[:, m:m + CONTEXT].mean(1) + 1.0
        length = CONTEXT + HORIZON
        mu, alpha, _ = net(lags_of(window, scale, m, length), time_features(t0, length), series, scale.log())
        loss = -negbin(mu, alpha, scale).log_prob(window[:, m:m + length]).mean()
        opt.zero_grad(); loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        LOSSES.append(loss.item())
    sched.step()
model.eval()
with torch.no_grad():
    start = T_TOTAL - CONTEXT - HORIZON
    series = torch.arange(N_SERIES)
    history = torch.from_numpy(counts[:, :start + CONTEXT]).clone()
    scale = history[:, start:].mean(1) + 1.0
    t0 = torch.full((N_SERIES,), start)
    _, _, state = net(lags_of(history, scale, start, CONTEXT), time_features(t0, CONTEXT), series, scale.log())
    preds, lls = [], []
    truth = torch.from_numpy(counts[:, start + CONTEXT:])
    for h in range(HORIZON):
        pos = history.shape[1]
        lag = torch.stack([history[:, pos - l] for l in LAGS], -1)[:, None] / scale[:, None, None]
        mu, alpha, state = net(lag, time_features(t0 + CONTEXT + h, 1), series, scale.log(), state)
        d = negbin(mu, alpha, scale)
        lls.append(d.log_prob(truth[:, h:h + 1]))
        preds.append(d.mean)
        history = torch.cat([history, d.mean], 1)
    preds = torch.cat(preds, 1)
    LOSSES += [torch.cat(lls, 1).mean().item(), (preds - truth).abs().mean().item(), preds.sum().item()]
