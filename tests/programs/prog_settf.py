from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
torch.manual_seed(0)

# Set Transformer (Lee et al. 2019), the reference repo's blocks: MAB (multihead attention
# block with its own Q/K/V projections), ISAB through learned inducing points, PMA pooling
# by learned seeds; sets of varying sizes are padded with pad_sequence and masked. The
# task: predict a set's max and its count above zero (a permutation-invariant regression),
# under MultiStepLR and Huber loss.
class MAB(nn.Module):
    def __init__(self, dim_Q, dim_K, dim_V, num_heads, ln=True):
        super().__init__()
        self.dim_V, self.num_heads = dim_V, num_heads
        self.fc_q, self.fc_k, self.fc_v = nn.Linear(dim_Q, dim_V), nn.Linear(dim_K, dim_V), nn.Linear(dim_K, dim_V)
        self.ln0, self.ln1 = (nn.LayerNorm(dim_V), nn.LayerNorm(dim_V)) if ln else (nn.Identity(), nn.Identity())
        self.fc_o = nn.Linear(dim_V, dim_V)
    def forward(self, Q, K, mask=None):
        Q = self.fc_q(Q)
        K, V = self.fc_k(K), self.fc_v(K)
        ds = self.dim_V // self.num_heads
        Q_, K_, V_ = (torch.cat(t.split(ds, 2), 0) for t in (Q, K, V))
        A = Q_.bmm(K_.transpose(1, 2)) / self.dim_V ** 0.5
        if mask is not None:   # mask: B, N (True = padding), repeated per head
            A = A.masked_fill(mask.repeat(self.num_heads, 1).unsqueeze(1), float("-inf"))
        A = torch.softmax(A, 2)
        O = torch.cat((Q_ + A.bmm(V_)).split(Q.size(0), 0), 2)
        O = self.ln0(O)
        return self.ln1(O + F.relu(self.fc_o(O)))

class ISAB(nn.Module):
    def __init__(self, dim_in, dim_out, num_heads, num_inds):
        super().__init__()
        self.I = nn.Parameter(torch.Tensor(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads)
    def forward(self, X, mask=None):
        H = self.mab0(self.I.repeat(X.size(0), 1, 1), X, mask)
        return self.mab1(X, H)

class PMA(nn.Module):
    def __init__(self, dim, num_heads, num_seeds):
        super().__init__()
        self.S = nn.Parameter(torch.Tensor(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads)
    def forward(self, X, mask=None):
        return self.mab(self.S.repeat(X.size(0), 1, 1), X, mask)

class SetTransformer(nn.Module):
    def __init__(self, dim_input=2, dim_hidden=16, num_heads=4, num_inds=4, dim_output=2):
        super().__init__()
        self.enc1 = ISAB(dim_input, dim_hidden, num_heads, num_inds)
        self.enc2 = ISAB(dim_hidden, dim_hidden, num_heads, num_inds)
        self.pma = PMA(dim_hidden, num_heads, 1)
        self.dec = nn.Linear(dim_hidden, dim_output)
    def forward(self, X, mask):
        H = self.enc2(self.enc1(X, mask), mask)
        return self.dec(self.pma(H, mask)).squeeze(1)

model = SetTransformer(); sync(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.3)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(5):
    sizes = rng.integers(3, 10, 6)
    sets = [torch.from_numpy(rng.standard_normal((n, 2)).astype(np.float32)) for n in sizes]
    X = pad_sequence(sets, batch_first=True)
    mask = torch.arange(X.size(1))[None, :] >= torch.tensor(sizes)[:, None]
    target = torch.stack([torch.stack([s[:, 0].max(), (s[:, 1] > 0).float().sum()]) for s in sets])
    loss = F.huber_loss(net(X, mask), target, delta=1.0)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES.append(loss.item())
with torch.no_grad():   # permutation invariance of the padded set
    perm = torch.from_numpy(rng.permutation(int(sizes[0])))
    X2 = X.clone(); X2[0, :sizes[0]] = X[0, perm]
    LOSSES += [(net(X2, mask) - net(X, mask)).abs().max().item() < 1e-5, net(X, mask).sum().item()]
