from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# EGNN (E(n)-equivariant graph network) on the n-body task as egnn's repository writes it:
# batches of charged particle systems as one graph (edge lists offset per system, charge
# products as edge attributes), E_GCL_vel layers (edge MLP on h[row], h[col] and squared
# distances, coordinates moved by coord_diff * coord_mlp(edge) averaged per node, plus
# coord_mlp_vel(h) * vel added in place; node update by unsorted_segment_sum's scatter_add_
# and a residual), a MeshGraphNet-style node encoder (MLP then LayerNorm); the mean here by
# index_add_ over the edges divided by torch.bincount's degree; a rollout of three steps
# fed back on its own predictions (velocity by finite differences) under a summed MSE;
# equivariance checked under a random rotation and translation in eval
def unsorted_segment_sum(data, segment_ids, num_segments):
    result_shape = (num_segments, data.size(1))
    result = data.new_full(result_shape, 0)   # Init empty result tensor.
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    return result
def unsorted_segment_mean(data, segment_ids, num_segments):
    result = torch.zeros(num_segments, data.size(1), dtype=data.dtype, device=data.device)
    result.index_add_(0, segment_ids, data)
    count = torch.bincount(segment_ids, minlength=num_segments).clamp(min=1)
    return result / count.unsqueeze(-1).to(data.dtype)
class E_GCL(nn.Module):
    def __init__(self, input_nf, output_nf, hidden_nf, edges_in_d=0, act_fn=nn.SiLU(), residual=True,
                 coords_agg='mean', tanh=False):
        super(E_GCL, self).__init__()
        input_edge = input_nf * 2
        self.residual, self.coords_agg, self.tanh = residual, coords_agg, tanh
        edge_coords_nf = 1
        self.edge_mlp = nn.Sequential(nn.Linear(input_edge + edge_coords_nf + edges_in_d, hidden_nf), act_fn,
                                      nn.Linear(hidden_nf, hidden_nf), act_fn)
        self.node_mlp = nn.Sequential(nn.Linear(hidden_nf + input_nf, hidden_nf), act_fn, nn.Linear(hidden_nf, output_nf))
        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=0.001)
        coord_mlp = [nn.Linear(hidden_nf, hidden_nf), act_fn, layer]
        if self.tanh:
            coord_mlp.append(nn.Tanh())
        self.coord_mlp = nn.Sequential(*coord_mlp)
    def edge_model(self, source, target, radial, edge_attr):
        if edge_attr is None:   # Unused.
            out = torch.cat([source, target, radial], dim=1)
        else:
            out = torch.cat([source, target, radial, edge_attr], dim=1)
        return self.edge_mlp(out)
    def node_model(self, x, edge_index, edge_attr, node_attr):
        row, col = edge_index
        agg = unsorted_segment_sum(edge_attr, row, num_segments=x.size(0))
        if node_attr is not None:
            agg = torch.cat([x, agg, node_attr], dim=1)
        else:
            agg = torch.cat([x, agg], dim=1)
        out = self.node_mlp(agg)
        if self.residual:
            out = x + out
        return out, agg
    def coord_model(self, coord, edge_index, coord_diff, edge_feat):
        row, col = edge_index
        trans = coord_diff * self.coord_mlp(edge_feat)
        if self.coords_agg == 'sum':
            agg = unsorted_segment_sum(trans, row, num_segments=coord.size(0))
        elif self.coords_agg == 'mean':
            agg = unsorted_segment_mean(trans, row, num_segments=coord.size(0))
        else:
            raise Exception('Wrong coords_agg parameter' % self.coords_agg)
        coord = coord + agg
        return coord
    def coord2radial(self, edge_index, coord):
        row, col = edge_index
        coord_diff = coord[row] - coord[col]
        radial = torch.sum(coord_diff ** 2, 1).unsqueeze(1)
        return radial, coord_diff
class E_GCL_vel(E_GCL):
    def __init__(self, input_nf, output_nf, hidden_nf, edges_in_d=0, act_fn=nn.SiLU(), coords_agg='mean'):
        E_GCL.__init__(self, input_nf, output_nf, hidden_nf, edges_in_d=edges_in_d, act_fn=act_fn, coords_agg=coords_agg)
        self.coord_mlp_vel = nn.Sequential(nn.Linear(input_nf, hidden_nf), act_fn, nn.Linear(hidden_nf, 1))
    def forward(self, h, edge_index, coord, vel, edge_attr=None, node_attr=None):
        row, col = edge_index
        radial, coord_diff = self.coord2radial(edge_index, coord)
        edge_feat = self.edge_model(h[row], h[col], radial, edge_attr)
        coord = self.coord_model(coord, edge_index, coord_diff, edge_feat)
        coord += self.coord_mlp_vel(h) * vel
        h, agg = self.node_model(h, edge_index, edge_feat, node_attr)
        return h, coord, edge_attr
class EGNN_vel(nn.Module):
    def __init__(self, in_node_nf, in_edge_nf, hidden_nf, act_fn=nn.SiLU(), n_layers=3):
        super(EGNN_vel, self).__init__()
        self.hidden_nf, self.n_layers = hidden_nf, n_layers
        self.embedding = nn.Sequential(nn.Linear(in_node_nf, hidden_nf), nn.ReLU(), nn.Linear(hidden_nf, hidden_nf),
                                       nn.LayerNorm(hidden_nf))   # MeshGraphNets' encoder
        for i in range(0, n_layers):
            self.add_module("gcl_%d" % i, E_GCL_vel(self.hidden_nf, self.hidden_nf, self.hidden_nf,
                                                    edges_in_d=in_edge_nf, act_fn=act_fn))
    def forward(self, h, x, edges, vel, edge_attr):
        h = self.embedding(h)
        for i in range(0, self.n_layers):
            h, x, _ = self._modules["gcl_%d" % i](h, edges, x, vel, edge_attr=edge_attr)
        return x
def simulate(rng, n_systems, n_balls=5, steps=4, dt=0.05):
    """Charged particles: Coulomb-like forces, integrated by leapfrog; returns each step's locations."""
    loc = rng.standard_normal((n_systems, n_balls, 3)) * 0.5
    vel = rng.standard_normal((n_systems, n_balls, 3)) * 0.3
    charges = rng.choice([-1.0, 1.0], size=(n_systems, n_balls, 1))
    locs, vels = [loc.copy()], [vel.copy()]
    for _ in range(steps):
        diff = loc[:, :, None] - loc[:, None]
        d2 = (diff ** 2).sum(-1, keepdims=True) + 0.1
        f = (charges[:, :, None] * charges[:, None] * diff / d2 ** 1.5).sum(2)
        vel = vel + dt * f; loc = loc + dt * vel
        locs.append(loc.copy()); vels.append(vel.copy())
    return locs, vels, charges
def batch_graph(n_systems, n_balls=5):
    rows, cols = [], []
    for b in range(n_systems):
        for i in range(n_balls):
            for j in range(n_balls):
                if i != j:
                    rows.append(b * n_balls + i); cols.append(b * n_balls + j)
    return [torch.LongTensor(rows), torch.LongTensor(cols)]
model = EGNN_vel(in_node_nf=1, in_edge_nf=1, hidden_nf=16); sync(model)
net = comp(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-12)
loss_mse = nn.MSELoss()
rng = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    n_systems = 4
    locs, vels, charges = simulate(rng, n_systems)
    edges = batch_graph(n_systems)
    as_t = lambda a: torch.from_numpy(a.reshape(-1, a.shape[-1]).astype(np.float32))
    charges_t = as_t(charges)
    edge_attr = charges_t[edges[0]] * charges_t[edges[1]]
    loc, vel = as_t(locs[0]), as_t(vels[0])
    optimizer.zero_grad()
    loss = 0
    for k in range(1, 4):   # rollout on the model's own predictions
        nodes = torch.sqrt(torch.sum(vel ** 2, dim=1)).unsqueeze(1).detach()
        loc_pred = net(nodes, loc, edges, vel, edge_attr)
        loss = loss + loss_mse(loc_pred, as_t(locs[k]))
        vel = (loc_pred - loc) / 0.05
        loc = loc_pred
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():   # equivariance: rotate and translate the inputs, the outputs follow
    locs, vels, charges = simulate(rng, 2)
    edges = batch_graph(2)
    as_t = lambda a: torch.from_numpy(a.reshape(-1, a.shape[-1]).astype(np.float32))
    charges_t = as_t(charges)
    edge_attr = charges_t[edges[0]] * charges_t[edges[1]]
    loc, vel = as_t(locs[0]), as_t(vels[0])
    nodes = torch.sqrt(torch.sum(vel ** 2, dim=1)).unsqueeze(1)
    Q, _ = torch.linalg.qr(torch.from_numpy(rng.standard_normal((3, 3)).astype(np.float32)))
    shift = torch.tensor([0.3, -0.2, 0.5])
    out = net(nodes, loc, edges, vel, edge_attr)
    out_rot = net(nodes, loc @ Q.T + shift, edges, vel @ Q.T, edge_attr)
    err = (out @ Q.T + shift - out_rot).abs().max()
LOSSES += [loss_mse(out, as_t(locs[1])).item(), float(err.item() < 1e-4), model.gcl_0.coord_mlp[2].weight.sum().item()]
