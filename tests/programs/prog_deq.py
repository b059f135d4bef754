from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch import autograd
torch.manual_seed(0)
# A deep equilibrium sequence model as locuslab/deq writes it: a weight-tied
# self-attention cell f(z, x) solved for its fixed point under torch.no_grad (Anderson
# acceleration over flattened states with a batched torch.linalg.solve, or plain
# iteration), one differentiable step re-engaging the tape, and the implicit backward by
# a hook on the output that solves the adjoint fixed point with torch.autograd.grad(f0, z0,
# y, retain_graph=True) and removes itself on its first call (the repo's guard against
# re-entry); a Jacobian-free variant (the one step's gradient only) in evaluation
D_MODEL, N_HEAD, SEQ, BATCH, VOCAB = 16, 2, 6, 4, 10


class DEQCell(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, n_head, batch_first=True, bias=True)
        self.ln1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.ln2 = nn.LayerNorm(d)

    def forward(self, z, x):
        h = z + x
        a, _ = self.attn(h, h, h, need_weights=False)
        z = self.ln1(z + 0.5 * a + x)
        return self.ln2(z + 0.5 * self.ff(z))


def anderson(f, x0, m=4, lam=1e-4, threshold=30, eps=1e-3, stop_mode="rel", beta=1.0):
    bsz = x0.shape[0]
    X = torch.zeros(bsz, m, x0[0].numel(), dtype=x0.dtype, device=x0.device)
    F_ = torch.zeros(bsz, m, x0[0].numel(), dtype=x0.dtype, device=x0.device)
    X[:, 0], F_[:, 0] = x0.reshape(bsz, -1), f(x0).reshape(bsz, -1)
    X[:, 1], F_[:, 1] = F_[:, 0], f(F_[:, 0].reshape_as(x0)).reshape(bsz, -1)
    H = torch.zeros(bsz, m + 1, m + 1, dtype=x0.dtype, device=x0.device)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = torch.zeros(bsz, m + 1, 1, dtype=x0.dtype, device=x0.device)
    y[:, 0] = 1
    trace = []
    lowest = float("inf")
    lowest_xest = x0
    for k in range(2, threshold):
        n = min(k, m)
        G = F_[:, :n] - X[:, :n]
        H[:, 1:n + 1, 1:n + 1] = torch.bmm(G, G.transpose(1, 2)) + lam * torch.eye(n, dtype=x0.dtype, device=x0.device)[None]
        alpha = torch.linalg.solve(H[:, :n + 1, :n + 1], y[:, :n + 1])[:, 1:n + 1, 0]
        X[:, k % m] = beta * (alpha[:, None] @ F_[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        F_[:, k % m] = f(X[:, k % m].reshape_as(x0)).reshape(bsz, -1)
        gx = (F_[:, k % m] - X[:, k % m]).view_as(x0)
        abs_diff = gx.norm().item()
        rel_diff = abs_diff / (1e-5 + F_[:, k % m].norm().item())
        trace.append(rel_diff if stop_mode == "rel" else abs_diff)
        if trace[-1] < lowest:
            lowest, lowest_xest = trace[-1], X[:, k % m].view_as(x0).clone().detach()
        if trace[-1] < eps:
            break
    return {"result": lowest_xest, "nstep": len(trace) + 2, "lowest": lowest}


def fixed_point_iter(f, x0, threshold=30, eps=1e-3):
    z = x0
    for k in range(threshold):
        z_next = f(z)
        diff = ((z_next - z).norm() / (z_next.norm() + 1e-5)).item()
        z = z_next
        if diff < eps:
            break
    return {"result": z, "nstep": k + 1, "lowest": diff}


class DEQLM(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, SEQ, D_MODEL))
        self.func = func
        self.out = nn.Linear(D_MODEL, VOCAB)
        self.hook = None
        self.f_solver = anderson
        self.jacobian_free = False
        self.stats = []

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos
        func = lambda z: self.func(z, x)
        z1 = torch.zeros_like(x)
        with torch.no_grad():
            res = self.f_solver(func, z1, threshold=30, eps=1e-3)
            z1 = res["result"]
        self.stats.append(res["nstep"])
        new_z1 = z1
        if self.training or torch.is_grad_enabled():
            new_z1 = func(z1.requires_grad_())
            if not self.jacobian_free:
                z1c = new_z1.clone().detach().requires_grad_()
                new_z1c = func(z1c)

                def backward_hook(grad):
                    if self.hook is not None:
                        self.hook.remove()     # the repo's guard: the hook runs once
                        self.hook = None
                    new_grad = self.f_solver(lambda y: autograd.grad(new_z1c, z1c, y, retain_graph=True)[0] + grad,
                                             torch.zeros_like(grad), threshold=30, eps=1e-4)
                    self.stats.append(new_grad["nstep"])
                    return new_grad["result"]
                self.hook = new_z1.register_hook(backward_hook)
        return self.out(new_z1)


cell = DEQCell(D_MODEL, N_HEAD)
with torch.no_grad():      # a contraction: scale the cell's mixing weights down
    for p in cell.ff.parameters():
        p.mul_(0.5)
model = DEQLM(comp(cell))
sync(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
rng = np.random.default_rng(0)
LOSSES = []
for it in range(4):
    # a toy task: predict each token's sum with the next one, mod VOCAB
    tokens = torch.from_numpy(rng.integers(0, VOCAB, (BATCH, SEQ)))
    target = (tokens + tokens.roll(-1, 1)) % VOCAB
    model.stats = []
    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    LOSSES += [loss.item(), model.stats[0], len(model.stats), float(model.hook is None)]
LOSSES.append(model.emb.weight.grad.norm().item())
model.eval()
model.f_solver = fixed_point_iter
model.jacobian_free = True                 # the one step's gradient only
tokens = torch.from_numpy(rng.integers(0, VOCAB, (BATCH, SEQ)))
logits = model(tokens)
logits.logsumexp(-1).sum().backward()
LOSSES += [logits.softmax(-1).max(-1).values.mean().item(), model.out.weight.grad.norm().item()]
with torch.no_grad():
    LOSSES.append(model(tokens).argmax(-1).float().sum().item())
