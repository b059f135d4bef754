from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# An Instant-NGP-lite multiresolution hash encoding as HashNeRF-pytorch writes it, fitted to
# a signed distance function DeepSDF/IGR-style: per level a resolution floor(base * b**i), the
# voxel's corner by floor(...).int(), its 8 corners by a broadcast add of BOX_OFFSETS (int64),
# a spatial hash XOR-ing coordinates times large primes (int64 ^= in a loop, then & (T - 1)
# by a tensor, or % T), an nn.Embedding table per level, trilinear interpolation by hand,
# a small Softplus(beta=100) MLP; the loss a clamped L1 to the true distance plus the eikonal
# term on autograd.grad(sdf, x, create_graph=True), Adam (eps=1e-15, as instant-ngp) with the
# tables and the MLP in two param groups, the tables without weight decay
BOX_OFFSETS = torch.tensor([[[i, j, k] for i in [0, 1] for j in [0, 1] for k in [0, 1]]])
def hash(coords, log2_hashmap_size):
    '''coords: this function can process upto 7 dim coordinates; log2T: logarithm of T w.r.t 2'''
    primes = [1, 2654435761, 805459861, 3674653429, 2097192037, 1434869437, 2165219737]
    xor_result = torch.zeros_like(coords)[..., 0]
    for i in range(coords.shape[-1]):
        xor_result ^= coords[..., i] * primes[i]
    return torch.tensor((1 << log2_hashmap_size) - 1).to(xor_result.device) & xor_result
def get_voxel_vertices(xyz, bounding_box, resolution, log2_hashmap_size):
    box_min, box_max = bounding_box
    keep_mask = xyz == torch.max(torch.min(xyz, box_max), box_min)
    xyz = torch.clamp(xyz, min=box_min, max=box_max)
    grid_size = (box_max - box_min) / resolution
    bottom_left_idx = torch.floor((xyz - box_min) / grid_size).int()
    voxel_min_vertex = bottom_left_idx * grid_size + box_min
    voxel_max_vertex = voxel_min_vertex + torch.tensor([1.0, 1.0, 1.0]) * grid_size
    voxel_indices = bottom_left_idx.unsqueeze(1) + BOX_OFFSETS
    hashed_voxel_indices = hash(voxel_indices, log2_hashmap_size)
    return voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices, keep_mask
class HashEmbedder(nn.Module):
    def __init__(self, bounding_box, n_levels=4, n_features_per_level=2, log2_hashmap_size=10,
                 base_resolution=4, finest_resolution=32):
        super(HashEmbedder, self).__init__()
        self.bounding_box = bounding_box
        self.n_levels = n_levels
        self.n_features_per_level = n_features_per_level
        self.log2_hashmap_size = log2_hashmap_size
        self.base_resolution = torch.tensor(base_resolution)
        self.finest_resolution = torch.tensor(finest_resolution)
        self.out_dim = self.n_levels * self.n_features_per_level
        self.b = torch.exp((torch.log(self.finest_resolution) - torch.log(self.base_resolution)) / (n_levels - 1))
        self.embeddings = nn.ModuleList([nn.Embedding(2 ** self.log2_hashmap_size, self.n_features_per_level)
                                         for i in range(n_levels)])
        for i in range(n_levels):   # custom uniform initialization
            nn.init.uniform_(self.embeddings[i].weight, a=-0.1, b=0.1)
    def trilinear_interp(self, x, voxel_min_vertex, voxel_max_vertex, voxel_embedds):
        weights = (x - voxel_min_vertex) / (voxel_max_vertex - voxel_min_vertex)   # B x 3
        # step 1: 0->000, 1->001, 2->010, 3->011, 4->100, 5->101, 6->110, 7->111
        c00 = voxel_embedds[:, 0] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 4] * weights[:, 0][:, None]
        c01 = voxel_embedds[:, 1] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 5] * weights[:, 0][:, None]
        c10 = voxel_embedds[:, 2] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 6] * weights[:, 0][:, None]
        c11 = voxel_embedds[:, 3] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 7] * weights[:, 0][:, None]
        # step 2
        c0 = c00 * (1 - weights[:, 1][:, None]) + c10 * weights[:, 1][:, None]
        c1 = c01 * (1 - weights[:, 1][:, None]) + c11 * weights[:, 1][:, None]
        # step 3
        return c0 * (1 - weights[:, 2][:, None]) + c1 * weights[:, 2][:, None]
    def forward(self, x):
        x_embedded_all = []
        for i in range(self.n_levels):
            resolution = torch.floor(self.base_resolution * self.b ** i)
            voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices, keep_mask = get_voxel_vertices(
                x, self.bounding_box, resolution, self.log2_hashmap_size)
            voxel_embedds = self.embeddings[i](hashed_voxel_indices)
            x_embedded = self.trilinear_interp(x, voxel_min_vertex, voxel_max_vertex, voxel_embedds)
            x_embedded_all.append(x_embedded)
        keep_mask = keep_mask.sum(dim=-1) == keep_mask.shape[-1]
        return torch.cat(x_embedded_all, dim=-1), keep_mask
class SDFNetwork(nn.Module):
    def __init__(self, bounding_box, hidden=32, num_layers=3, use_modulo=False):
        super().__init__()
        self.encoder = HashEmbedder(bounding_box)
        dims = [self.encoder.out_dim + 3] + [hidden] * (num_layers - 1) + [1]
        self.lins = nn.ModuleList([nn.Linear(dims[l], dims[l + 1]) for l in range(num_layers)])
        self.activation = nn.Softplus(beta=100)
        self.use_modulo = use_modulo
    def forward(self, x):
        h, keep_mask = self.encoder(x)
        h = torch.cat([x, h], dim=-1)   # the raw coordinates too, as torch-ngp's SDF net
        for l, lin in enumerate(self.lins):
            h = lin(h)
            if l < len(self.lins) - 1:
                h = self.activation(h)
        return h[:, 0] * keep_mask.float()
def sdf_box(p, b=torch.tensor([0.5, 0.3, 0.4])):   # Inigo Quilez's exact box distance
    q = p.abs() - b
    return q.clamp(min=0).norm(dim=-1) + torch.clamp(q.max(dim=-1)[0], max=0)
bounding_box = (torch.tensor([-1.0, -1.0, -1.0]), torch.tensor([1.0, 1.0, 1.0]))
model = SDFNetwork(bounding_box); sync(model)
net = comp(model)
optimizer = torch.optim.Adam([{'params': model.encoder.parameters(), 'weight_decay': 0.0},
                              {'params': model.lins.parameters(), 'weight_decay': 1e-6}],
                             lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
r = np.random.default_rng(0)
clamp_dist, lambda_eik = 0.1, 0.1
LOSSES = []
for step in range(6):
    surface = r.standard_normal((96, 3)); surface *= np.array([0.5, 0.3, 0.4]) / np.abs(surface).max(1, keepdims=True)
    pts = np.concatenate([surface + 0.02 * r.standard_normal(surface.shape), r.uniform(-1.05, 1.05, (96, 3))])
    x = torch.from_numpy(pts.astype(np.float32)).requires_grad_(True)
    gt = sdf_box(x.detach())
    sdf = net(x)
    # DeepSDF's clamped L1, and the eikonal term on the spatial gradient
    loss_sdf = (torch.clamp(sdf, -clamp_dist, clamp_dist) - torch.clamp(gt, -clamp_dist, clamp_dist)).abs().mean()
    gradients = torch.autograd.grad(outputs=sdf, inputs=x, grad_outputs=torch.ones_like(sdf), create_graph=True,
                                    retain_graph=True, only_inputs=True)[0]
    loss_eik = ((gradients.norm(2, dim=-1) - 1) ** 2).mean()
    loss = loss_sdf + lambda_eik * loss_eik
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss_sdf.item(), loss_eik.item()]
with torch.no_grad():   # marching-cubes style query on a grid, in chunks
    g = torch.linspace(-1, 1, 9)
    grid = torch.stack(torch.meshgrid(g, g, g, indexing='ij'), -1).reshape(-1, 3)
    vals = torch.cat([net(chunk) for chunk in torch.split(grid, 243)])
LOSSES += [vals.abs().mean().item(), (vals < 0).float().sum().item(), model.encoder.embeddings[0].weight.abs().sum().item()]
