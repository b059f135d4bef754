from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# PaiNN (Schuett et al. 2021, as schnetpack writes it), scaled down: equivariant message
# passing with scalar features (atoms, F) and vector features (atoms, 3, F) started at
# zeros, sinc radial basis sin(n pi r / rc) / r times a cosine cutoff, messages split
# three ways by torch.split, aggregated by an out-of-place index_add into (atoms, 3, F)
# buffers; the update's vector norms sqrt(sum(V^2) + eps) and the scalar product
# sum(V * W, dim=1); pairs inside each molecule by torch.combinations, both directions;
# energy per molecule by index_add over a batch vector, forces by
# -autograd.grad(energy, positions, create_graph=True), a dipole-like vector target read off
# the vector features; AdamW, clip_grad_norm_, ExponentialLR; molecule sizes dynamic


def sinc_expansion(r, n_rbf, cutoff):
    n = torch.arange(1, n_rbf + 1, dtype=r.dtype, device=r.device)
    return torch.sin(r[..., None] * n * math.pi / cutoff) / r[..., None]


def cosine_cutoff(r, cutoff):
    return 0.5 * (torch.cos(r * math.pi / cutoff) + 1.0) * (r < cutoff).float()


def scatter_add(x, idx_i, dim_size):
    shape = list(x.shape)
    shape[0] = dim_size
    return torch.zeros(shape, dtype=x.dtype, device=x.device).index_add(0, idx_i, x)


class PaiNNInteraction(nn.Module):
    def __init__(self, n_atom_basis):
        super().__init__()
        self.n_atom_basis = n_atom_basis
        self.interatomic_context_net = nn.Sequential(nn.Linear(n_atom_basis, n_atom_basis), nn.SiLU(),
                                                     nn.Linear(n_atom_basis, 3 * n_atom_basis))

    def forward(self, q, mu, Wij, dir_ij, idx_i, idx_j, n_atoms):
        x = self.interatomic_context_net(q)
        xj = x[idx_j]
        muj = mu[idx_j]
        x = Wij * xj
        dq, dmuR, dmumu = torch.split(x, self.n_atom_basis, dim=-1)
        dq = scatter_add(dq, idx_i, dim_size=n_atoms)
        dmu = dmuR * dir_ij[..., None] + dmumu * muj
        dmu = scatter_add(dmu, idx_i, dim_size=n_atoms)
        return q + dq, mu + dmu


class PaiNNMixing(nn.Module):
    def __init__(self, n_atom_basis, epsilon=1e-8):
        super().__init__()
        self.n_atom_basis = n_atom_basis
        self.intraatomic_context_net = nn.Sequential(nn.Linear(2 * n_atom_basis, n_atom_basis), nn.SiLU(),
                                                     nn.Linear(n_atom_basis, 3 * n_atom_basis))
        self.mu_channel_mix = nn.Linear(n_atom_basis, 2 * n_atom_basis, bias=False)
        self.epsilon = epsilon

    def forward(self, q, mu):
        mu_mix = self.mu_channel_mix(mu)
        mu_V, mu_W = torch.split(mu_mix, self.n_atom_basis, dim=-1)
        mu_Vn = torch.sqrt(torch.sum(mu_V ** 2, dim=-2, keepdim=True) + self.epsilon)
        ctx = torch.cat([q, mu_Vn], dim=-1)
        x = self.intraatomic_context_net(ctx)
        dq_intra, dmu_intra, dqmu_intra = torch.split(x, self.n_atom_basis, dim=-1)
        dmu_intra = dmu_intra * mu_W
        dqmu_intra = dqmu_intra * torch.sum(mu_V * mu_W, dim=1, keepdim=True)
        return q + dq_intra + dqmu_intra, mu + dmu_intra


class PaiNN(nn.Module):
    def __init__(self, n_atom_basis=16, n_interactions=2, n_rbf=8, cutoff=4.0, max_z=10):
        super().__init__()
        self.n_atom_basis, self.n_interactions, self.n_rbf, self.cutoff = n_atom_basis, n_interactions, n_rbf, cutoff
        self.embedding = nn.Embedding(max_z, n_atom_basis, padding_idx=0)
        self.filter_net = nn.Linear(n_rbf, n_interactions * n_atom_basis * 3)
        self.interactions = nn.ModuleList([PaiNNInteraction(n_atom_basis) for _ in range(n_interactions)])
        self.mixing = nn.ModuleList([PaiNNMixing(n_atom_basis) for _ in range(n_interactions)])
        self.energy_head = nn.Sequential(nn.Linear(n_atom_basis, n_atom_basis // 2), nn.SiLU(),
                                         nn.Linear(n_atom_basis // 2, 1))
        self.dipole_head = nn.Linear(n_atom_basis, 1, bias=False)

    def forward(self, Z, R, idx_i, idx_j, batch, n_molecules: int):
        n_atoms = Z.shape[0]
        r_ij = R[idx_j] - R[idx_i]
        d_ij = torch.norm(r_ij, dim=1, keepdim=True)
        dir_ij = r_ij / d_ij
        phi_ij = sinc_expansion(d_ij, self.n_rbf, self.cutoff)
        fcut = cosine_cutoff(d_ij, self.cutoff)
        filters = self.filter_net(phi_ij) * fcut[..., None]
        filter_list = torch.split(filters, 3 * self.n_atom_basis, dim=-1)
        q = self.embedding(Z)[:, None]
        mu = torch.zeros((n_atoms, 3, self.n_atom_basis), dtype=q.dtype)
        for i, (interaction, mixing) in enumerate(zip(self.interactions, self.mixing)):
            q, mu = interaction(q, mu, filter_list[i], dir_ij, idx_i, idx_j, n_atoms)
            q, mu = mixing(q, mu)
        q = q.squeeze(1)
        e_atom = self.energy_head(q).squeeze(-1)
        energy = torch.zeros(n_molecules, dtype=q.dtype).index_add(0, batch, e_atom)
        dipole = scatter_add(self.dipole_head(mu).squeeze(-1), batch, n_molecules)
        return energy, dipole


def lj_energy(pos):
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(pos))
    e = 0.2 * ((1.1 / d) ** 12 - 2 * (1.1 / d) ** 6)
    np.fill_diagonal(e, 0)
    return 0.5 * e.sum()


def make_molecule(rng):
    k = int(rng.integers(3, 6))
    pos = rng.standard_normal((k, 3)) * 1.1
    z = rng.integers(1, 5, k)
    forces = np.zeros_like(pos)
    for a in range(k):
        for c in range(3):
            p1, p2 = pos.copy(), pos.copy(); p1[a, c] += 1e-5; p2[a, c] -= 1e-5
            forces[a, c] = -(lj_energy(p1) - lj_energy(p2)) / 2e-5
    charge = (z - z.mean()) * 0.1
    dipole = (charge[:, None] * pos).sum(0)
    return z, pos.astype(np.float32), np.float32(np.tanh(lj_energy(pos) / 10) * 10), forces.astype(np.float32).clip(-5, 5), dipole.astype(np.float32)


def collate(mols):
    Z, R, idx_i, idx_j, batch, offset = [], [], [], [], [], 0
    for m, (z, pos, *_rest) in enumerate(mols):
        pairs = torch.combinations(torch.arange(len(z)), r=2)
        idx_i += [pairs[:, 0] + offset, pairs[:, 1] + offset]
        idx_j += [pairs[:, 1] + offset, pairs[:, 0] + offset]
        Z.append(torch.from_numpy(z)); R.append(torch.from_numpy(pos))
        batch.append(torch.full((len(z),), m, dtype=torch.long))
        offset += len(z)
    energy = torch.tensor(np.array([m[2] for m in mols]))
    forces = torch.from_numpy(np.concatenate([m[3] for m in mols]))
    dipole = torch.from_numpy(np.stack([m[4] for m in mols]))
    return torch.cat(Z), torch.cat(R), torch.cat(idx_i), torch.cat(idx_j), torch.cat(batch), energy, forces, dipole


rng = np.random.default_rng(0)
mols = [make_molecule(rng) for _ in range(12)]
batches = [collate(mols[i:i + 4]) for i in range(0, 12, 4)]
model = PaiNN(); sync(model)
fwd = comp(model, dynamic=True, fullgraph=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
LOSSES = []
for epoch in range(2):
    model.train()
    for Z, R, idx_i, idx_j, batch, energy, forces, dipole in batches:
        R = R.clone().requires_grad_(True)
        e_pred, d_pred = fwd(Z, R, idx_i, idx_j, batch, energy.shape[0])
        f_pred = -torch.autograd.grad(e_pred.sum(), R, create_graph=True)[0]
        loss = F.mse_loss(e_pred, energy) + 0.5 * F.mse_loss(f_pred, forces) + 0.1 * F.mse_loss(d_pred, dipole)
        optimizer.zero_grad()
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        optimizer.step()
        LOSSES += [loss.item(), gn.item()]
    scheduler.step()
model.eval()
Z, R, idx_i, idx_j, batch, energy, forces, dipole = collate([make_molecule(rng) for _ in range(3)])
R.requires_grad_(True)
e_pred, d_pred = fwd(Z, R, idx_i, idx_j, batch, 3)
f_pred = -torch.autograd.grad(e_pred.sum(), R)[0]
LOSSES += [F.l1_loss(e_pred, energy).item(), F.l1_loss(f_pred, forces).item(), F.l1_loss(d_pred, dipole).item()]
# the equivariance a rotation must keep: energies unchanged, dipoles rotated
with torch.no_grad():
    Q = torch.linalg.qr(torch.from_numpy(rng.standard_normal((3, 3)).astype(np.float32)))[0]
    e_rot, d_rot = fwd(Z, R @ Q.T, idx_i, idx_j, batch, 3)
LOSSES += [(e_rot - e_pred).abs().max().item() < 1e-3, (d_rot - d_pred @ Q.T).abs().max().item() < 1e-3]
