from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.distributions import Categorical
torch.manual_seed(0)
# Kool et al.'s attention model for the travelling salesman problem, trained by REINFORCE,
# as the public ports write it: a Transformer encoder over the node coordinates, a
# decoding loop whose context is the graph embedding with the first and last visited
# nodes' embeddings, a glimpse of multi-head attention over the unvisited nodes and
# tanh-clipped single-head logits, visited nodes masked by mask.scatter(1, idx, True) and
# masked_fill(-inf), Categorical log_prob sums, tour length by gather and torch.roll, an
# exponential moving baseline, gradient clipping and greedy decoding for evaluation. The
# frameworks' generators differ, so the compared run samples by inverse CDF from numpy
# uniforms; one Categorical.sample() decoding is checked for what it must give
N_NODES, D, HEADS, BATCH, CLIP = 8, 32, 4, 16, 10.0


class AttentionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.init_embed = nn.Linear(2, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.project_node_embeddings = nn.Linear(D, 3 * D, bias=False)
        self.project_fixed_context = nn.Linear(D, D, bias=False)
        self.project_step_context = nn.Linear(2 * D, D, bias=False)
        self.project_out = nn.Linear(D, D, bias=False)
        self.W_placeholder = nn.Parameter(torch.empty(2 * D).uniform_(-1, 1))

    def _heads(self, v):          # (b, n, D) -> (b, h, n, D/h)
        return v.view(v.size(0), v.size(1), HEADS, -1).transpose(1, 2)

    def forward(self, coords, u=None):
        b, n, _ = coords.shape
        emb = self.encoder(self.init_embed(coords))
        graph = emb.mean(1)
        fixed_ctx = self.project_fixed_context(graph)[:, None, :]
        glimpse_K, glimpse_V, logit_K = self.project_node_embeddings(emb).chunk(3, dim=-1)
        glimpse_K, glimpse_V = self._heads(glimpse_K), self._heads(glimpse_V)
        mask = torch.zeros(b, n, dtype=torch.bool)
        first = last = None
        log_ps, tour = [], []
        for step in range(n):
            if step == 0:
                step_ctx = self.W_placeholder[None, None, :].expand(b, 1, -1)
            else:
                idx = torch.stack([first, last], 1)[:, :, None].expand(-1, -1, D)
                step_ctx = emb.gather(1, idx).view(b, 1, 2 * D)
            query = fixed_ctx + self.project_step_context(step_ctx)          # (b, 1, D)
            q = self._heads(query)                                            # (b, h, 1, d)
            compat = q @ glimpse_K.transpose(-2, -1) / math.sqrt(q.size(-1))
            compat = compat.masked_fill(mask[:, None, None, :], float("-inf"))
            heads = torch.softmax(compat, dim=-1) @ glimpse_V                 # (b, h, 1, d)
            glimpse = self.project_out(heads.transpose(1, 2).reshape(b, 1, D))
            logits = (glimpse @ logit_K.transpose(-2, -1)).squeeze(1) / math.sqrt(D)
            logits = torch.tanh(logits) * CLIP
            logits = logits.masked_fill(mask, float("-inf"))
            dist = Categorical(logits=logits)
            if u is None:
                selected = logits.argmax(-1)                                  # greedy
            elif isinstance(u, str):
                selected = dist.sample()
            else:                                                             # inverse CDF
                selected = (dist.probs.cumsum(-1) < u[:, step:step + 1]).sum(-1).clamp(max=n - 1)
            log_ps.append(dist.log_prob(selected))
            tour.append(selected)
            mask = mask.scatter(1, selected[:, None], True)
            if step == 0:
                first = selected
            last = selected
        return torch.stack(tour, 1), torch.stack(log_ps, 1).sum(1)


def tour_length(coords, tour):
    d = coords.gather(1, tour[..., None].expand(-1, -1, 2))
    return (d - d.roll(-1, dims=1)).norm(p=2, dim=-1).sum(1)


model = AttentionModel(); sync(model)
policy = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
rng = np.random.default_rng(0)
baseline, beta = None, 0.8
LOSSES = []
for it in range(5):
    coords = torch.from_numpy(rng.random((BATCH, N_NODES, 2)).astype(np.float32))
    u = torch.from_numpy(rng.random((BATCH, N_NODES)).astype(np.float32))
    model.train()
    tour, log_p = policy(coords, u)
    cost = tour_length(coords, tour)
    baseline = cost.mean() if baseline is None else beta * baseline + (1 - beta) * cost.mean()
    reinforce_loss = ((cost - baseline.detach()) * log_p).mean()
    optimizer.zero_grad()
    reinforce_loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    baseline = baseline.detach()
    valid = torch.sort(tour, 1).values.eq(torch.arange(N_NODES)).all()
    LOSSES += [reinforce_loss.item(), cost.mean().item(), grad_norm.item(), float(valid.item())]
model.eval()
with torch.no_grad():
    coords = torch.from_numpy(rng.random((BATCH, N_NODES, 2)).astype(np.float32))
    tour, log_p = policy(coords)
    LOSSES += [tour_length(coords, tour).mean().item(), log_p.sum().item()]
    tour, _ = model(coords, "sample")       # the generator's own draws: a permutation each
    LOSSES.append(float(torch.sort(tour, 1).values.eq(torch.arange(N_NODES)).all().item()))
