from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch
from torch import nn
torch.manual_seed(0)
# DimeNet (Gasteiger et al., as PyTorch Geometric's DimeNet writes it), scaled down and
# without torch_scatter: a radius graph and its triplets k->j->i built in torch
# (cdist, nonzero, repeat_interleave over each edge's incoming edges), angles by acos of
# clamped cosines, a Bessel radial basis under the polynomial envelope, a cos(l * angle)
# angular basis, directional message passing (edge messages gathered at their triplets,
# a bilinear einsum, index_add_ back to edges), per-atom outputs summed per molecule by
# scatter_add_, energies trained by AdamW under an ExponentialLR; molecule sizes change,
# so the compiled model goes dynamic


class Envelope(nn.Module):
    def __init__(self, exponent):
        super().__init__()
        self.p = exponent + 1
        self.a = -(self.p + 1) * (self.p + 2) / 2
        self.b = self.p * (self.p + 2)
        self.c = -self.p * (self.p + 1) / 2

    def forward(self, x):
        p, a, b, c = self.p, self.a, self.b, self.c
        x_pow_p0 = x.pow(p - 1)
        x_pow_p1 = x_pow_p0 * x
        x_pow_p2 = x_pow_p1 * x
        return (1. / x + a * x_pow_p0 + b * x_pow_p1 + c * x_pow_p2) * (x < 1.0).to(x.dtype)


class BesselBasisLayer(nn.Module):
    def __init__(self, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.arange(1, num_radial + 1).float().mul_(math.pi))

    def forward(self, dist):
        dist = dist.unsqueeze(-1) / self.cutoff
        return self.envelope(dist) * (self.freq * dist).sin()


class AngularBasisLayer(nn.Module):
    def __init__(self, num_spherical, num_radial, cutoff=5.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.register_buffer("orders", torch.arange(num_spherical).float())
        self.register_buffer("freq", torch.arange(1, num_radial + 1).float() * math.pi)

    def forward(self, dist, angle, idx_kj):
        dist = dist.unsqueeze(-1) / self.cutoff
        rbf = self.envelope(dist) * (self.freq * dist).sin()            # [E, R]
        cbf = torch.cos(self.orders * angle.unsqueeze(-1))              # [T, S]
        out = (rbf[idx_kj].unsqueeze(1) * cbf.unsqueeze(-1))            # [T, S, R]
        return out.view(-1, cbf.size(1) * rbf.size(1))


class EmbeddingBlock(nn.Module):
    def __init__(self, num_radial, hidden_channels, act):
        super().__init__()
        self.act = act
        self.emb = nn.Embedding(95, hidden_channels)
        self.lin_rbf = nn.Linear(num_radial, hidden_channels)
        self.lin = nn.Linear(3 * hidden_channels, hidden_channels)

    def forward(self, x, rbf, i, j):
        x = self.emb(x)
        rbf = self.act(self.lin_rbf(rbf))
        return self.act(self.lin(torch.cat([x[i], x[j], rbf], dim=-1)))


class InteractionBlock(nn.Module):
    def __init__(self, hidden_channels, num_bilinear, num_spherical, num_radial, act):
        super().__init__()
        self.act = act
        self.lin_rbf = nn.Linear(num_radial, hidden_channels, bias=False)
        self.lin_sbf = nn.Linear(num_spherical * num_radial, num_bilinear, bias=False)
        self.lin_kj = nn.Linear(hidden_channels, hidden_channels)
        self.lin_ji = nn.Linear(hidden_channels, hidden_channels)
        self.W = nn.Parameter(torch.empty(hidden_channels, num_bilinear, hidden_channels))
        self.W.data.normal_(mean=0, std=2 / self.W.size(0))
        self.lin = nn.Linear(hidden_channels, hidden_channels)

    def forward(self, x, rbf, sbf, idx_kj, idx_ji):
        rbf = self.lin_rbf(rbf)
        sbf = self.lin_sbf(sbf)
        x_ji = self.act(self.lin_ji(x))
        x_kj = self.act(self.lin_kj(x))
        x_kj = x_kj * rbf
        x_kj = torch.einsum('wj,wl,ijl->wi', sbf, x_kj[idx_kj], self.W)
        x_kj = torch.zeros_like(x).index_add_(0, idx_ji, x_kj)
        h = x_ji + x_kj
        return x + self.act(self.lin(h))


class OutputBlock(nn.Module):
    def __init__(self, num_radial, hidden_channels, out_channels, act):
        super().__init__()
        self.act = act
        self.lin_rbf = nn.Linear(num_radial, hidden_channels, bias=False)
        self.lin = nn.Linear(hidden_channels, hidden_channels)
        self.lin_out = nn.Linear(hidden_channels, out_channels, bias=False)

    def forward(self, x, rbf, i, num_nodes):
        x = self.lin_rbf(rbf) * x
        x = x.new_zeros(num_nodes, x.size(1)).index_add_(0, i, x)
        return self.lin_out(self.act(self.lin(x)))


def triplets(edge_index, num_nodes):
    """(idx_kj, idx_ji): for every edge j->i, every edge k->j with k != i."""
    row, col = edge_index  # j->i
    # the edges into each node, grouped by their target: a CSR layout by sorting
    order = torch.argsort(col, stable=True)
    counts = torch.bincount(col, minlength=num_nodes)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    num_triplets = counts[row]                       # edges k->j for each j->i
    idx_ji = torch.arange(row.size(0)).repeat_interleave(num_triplets)
    start = ptr[row].repeat_interleave(num_triplets)
    offset = torch.arange(idx_ji.size(0)) - (num_triplets.cumsum(0) - num_triplets).repeat_interleave(num_triplets)
    idx_kj = order[start + offset]
    mask = row[idx_kj] != col[idx_ji]                 # k != i
    return idx_kj[mask], idx_ji[mask]


class DimeNet(nn.Module):
    def __init__(self, hidden_channels=16, out_channels=1, num_blocks=2, num_bilinear=4,
                 num_spherical=3, num_radial=4, cutoff=3.0, envelope_exponent=5):
        super().__init__()
        self.cutoff = cutoff
        act = nn.SiLU()
        self.rbf = BesselBasisLayer(num_radial, cutoff, envelope_exponent)
        self.sbf = AngularBasisLayer(num_spherical, num_radial, cutoff, envelope_exponent)
        self.emb = EmbeddingBlock(num_radial, hidden_channels, act)
        self.output_blocks = nn.ModuleList([
            OutputBlock(num_radial, hidden_channels, out_channels, act) for _ in range(num_blocks + 1)])
        self.interaction_blocks = nn.ModuleList([
            InteractionBlock(hidden_channels, num_bilinear, num_spherical, num_radial, act)
            for _ in range(num_blocks)])

    def forward(self, z, pos, batch, num_graphs: int):
        same = batch.unsqueeze(0) == batch.unsqueeze(1)
        adj = (torch.cdist(pos, pos) < self.cutoff) & same
        adj.fill_diagonal_(False)
        j, i = adj.nonzero().t()                         # edge j->i
        idx_kj, idx_ji = triplets(torch.stack([j, i]), z.size(0))
        dist = (pos[i] - pos[j]).pow(2).sum(dim=-1).sqrt()
        # the angle at j between j->i and k->j, as acos of the clamped cosine
        pos_ji = pos[i[idx_ji]] - pos[j[idx_ji]]
        pos_kj = pos[j[idx_kj]] - pos[i[idx_kj]]
        cos = (pos_ji * pos_kj).sum(dim=-1) / (pos_ji.norm(dim=-1) * pos_kj.norm(dim=-1))
        angle = torch.acos(cos.clamp(-1 + 1e-6, 1 - 1e-6))
        rbf = self.rbf(dist)
        sbf = self.sbf(dist, angle, idx_kj)
        x = self.emb(z, rbf, i, j)
        P = self.output_blocks[0](x, rbf, i, num_nodes=pos.size(0))
        for interaction_block, output_block in zip(self.interaction_blocks, self.output_blocks[1:]):
            x = interaction_block(x, rbf, sbf, idx_kj, idx_ji)
            P = P + output_block(x, rbf, i, num_nodes=pos.size(0))
        out = torch.zeros(num_graphs, P.size(1)).scatter_add_(0, batch.unsqueeze(1).expand_as(P), P)
        return out, angle


rng = np.random.default_rng(0)


def molecules(num_graphs):
    sizes = rng.integers(3, 7, num_graphs)
    z = torch.from_numpy(rng.choice([1, 6, 7, 8], sizes.sum()))
    pos = torch.from_numpy((rng.standard_normal((sizes.sum(), 3)) * 1.2).astype(np.float32))
    batch = torch.from_numpy(np.repeat(np.arange(num_graphs), sizes))
    y = torch.from_numpy(rng.standard_normal((num_graphs, 1)).astype(np.float32))
    return z, pos, batch, y


model = DimeNet(); sync(model)
net = comp(model, dynamic=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
LOSSES = []
for step in range(4):
    z, pos, batch, y = molecules(4)
    out, angle = net(z, pos, batch, 4)
    loss = nn.functional.l1_loss(out, y)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), angle.sum().item(), float(angle.numel())]
model.eval()
with torch.no_grad():
    z, pos, batch, y = molecules(3)
    out, angle = net(z, pos, batch, 3)
LOSSES += out.flatten().tolist()
