from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# GRU4Rec (Hidasi et al.; the GRU4Rec_PyTorch recipe): session-parallel mini-batches (each
# of B lanes walks one session; when it ends the lane takes the next session and its
# hidden state is zeroed by masked_fill on a boolean mask), one nn.GRU step per event on
# the item embedding, scores against the batch's own target items as negatives (out @
# E[targets].T), the TOP1-max and BPR-max losses (softmax over the negatives' scores) plus
# cross-entropy over the in-batch logits, Adagrad, the hidden state detached between
# steps; evaluation by Recall@5 and MRR@5 over all items under no_grad, ranks counted by
# comparison with the target's score
class GRU4Rec(nn.Module):
    def __init__(self, n_items, emb=16, hidden=24, layers=1):
        super().__init__()
        self.look_up = nn.Embedding(n_items, emb)
        self.gru = nn.GRU(emb, hidden, layers)
        self.h2o = nn.Linear(hidden, emb)
        self.final_activation = nn.Tanh()
    def forward(self, item, hidden):
        x = self.look_up(item).unsqueeze(0)
        out, hidden = self.gru(x, hidden)
        return self.final_activation(self.h2o(out.squeeze(0))), hidden
    def score(self, out, targets):
        return out @ self.look_up(targets).t()
def top1_max(logit):
    logit_softmax = F.softmax(logit, dim=1)
    diff = -(logit.diag().view(-1, 1).expand_as(logit) - logit)
    return torch.mean(logit_softmax * (torch.sigmoid(diff) + torch.sigmoid(logit ** 2)))
def bpr_max(logit):
    logit_softmax = F.softmax(logit, dim=1)
    diff = logit.diag().view(-1, 1).expand_as(logit) - logit
    return -torch.log(torch.mean(logit_softmax * torch.sigmoid(diff)))
def session_parallel(sessions, batch_size):
    """Yields (inputs, targets, mask of lanes that just started a new session)."""
    iters = list(range(batch_size))
    nxt = batch_size
    pos = [0] * batch_size
    start = np.ones(batch_size, bool)
    while True:
        inp = np.array([sessions[s][p] for s, p in zip(iters, pos)])
        tgt = np.array([sessions[s][p + 1] for s, p in zip(iters, pos)])
        yield inp, tgt, start.copy()
        start[:] = False
        for lane in range(batch_size):
            pos[lane] += 1
            if pos[lane] + 1 >= len(sessions[iters[lane]]):
                if nxt >= len(sessions):
                    return
                iters[lane], pos[lane], start[lane] = nxt, 0, True
                nxt += 1
rng = np.random.default_rng(0)
N_ITEMS, B, HIDDEN = 50, 8, 24
def make_session():
    n = int(rng.integers(2, 7))
    first = rng.integers(1, N_ITEMS)
    return [int((first + 3 * k + rng.integers(0, 2)) % N_ITEMS) for k in range(n)]
train, test = [make_session() for _ in range(40)], [make_session() for _ in range(12)]
model = GRU4Rec(N_ITEMS, hidden=HIDDEN); sync(model)
net = comp(model)
opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
LOSSES = []
for epoch in range(2):
    model.train()
    hidden = torch.zeros(1, B, HIDDEN)
    total, steps = 0.0, 0
    for inp, tgt, start in session_parallel(train, B):
        hidden = hidden.masked_fill(torch.from_numpy(start)[None, :, None], 0.0).detach()
        out, hidden = net(torch.from_numpy(inp), hidden)
        logit = model.score(out, torch.from_numpy(tgt))
        loss = top1_max(logit) + 0.5 * bpr_max(logit) + F.cross_entropy(logit, torch.arange(B))
        opt.zero_grad(); loss.backward(); opt.step()
        total += loss.item(); steps += 1
    LOSSES += [total / steps, float(steps)]
model.eval()
with torch.no_grad():
    hidden = torch.zeros(1, B, HIDDEN)
    recall, mrr, n = 0.0, 0.0, 0
    for inp, tgt, start in session_parallel(test, B):
        hidden[:, torch.from_numpy(start)] = 0
        out, hidden = net(torch.from_numpy(inp), hidden)
        scores = out @ model.look_up.weight.t()
        tgt = torch.from_numpy(tgt)
        rank = (scores > scores.gather(1, tgt[:, None])).sum(1) + 1
        hit = rank <= 5
        recall += hit.float().sum().item(); mrr += (hit.float() / rank.float()).sum().item(); n += B
    LOSSES += [recall / n, mrr / n]
