from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Point Transformer (Zhao et al. 2021; the qq456cvb/Point-Transformers classifier),
# scaled down: kNN by topk(largest=False) on cdist, neighbour features by batched index
# gather (index_points), vector self-attention whose weights come from an MLP over
# q_i - k_j + delta(p_i - p_j), softmax over the neighbours scaled by sqrt(d), transition
# down by farthest point sampling and max over kNN groups; label-smoothed cross-entropy,
# Adam under StepLR, random rotation about z and jitter as augmentation, compiled whole
# with fullgraph=True


def square_distance(src, dst):
    return torch.sum((src[:, :, None] - dst[:, None]) ** 2, dim=-1)


def index_points(points, idx):
    raw_size = idx.size()
    idx = idx.reshape(raw_size[0], -1)
    res = torch.gather(points, 1, idx[..., None].expand(-1, -1, points.size(-1)))
    return res.reshape(*raw_size, -1)


def farthest_point_sample(xyz, npoint):
    B, N, C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N) * 1e10
    farthest = torch.zeros(B, dtype=torch.long)
    batch_indices = torch.arange(B, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        distance = torch.min(distance, dist)
        farthest = torch.max(distance, -1)[1]
    return centroids


class TransformerBlock(nn.Module):
    def __init__(self, d_points, d_model, k):
        super().__init__()
        self.fc1 = nn.Linear(d_points, d_model)
        self.fc2 = nn.Linear(d_model, d_points)
        self.fc_delta = nn.Sequential(nn.Linear(3, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.fc_gamma = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model))
        self.w_qs = nn.Linear(d_model, d_model, bias=False)
        self.w_ks = nn.Linear(d_model, d_model, bias=False)
        self.w_vs = nn.Linear(d_model, d_model, bias=False)
        self.k = k

    def forward(self, xyz, features):
        dists = torch.cdist(xyz, xyz)
        knn_idx = dists.topk(self.k, dim=-1, largest=False)[1]
        knn_xyz = index_points(xyz, knn_idx)
        pre = features
        x = self.fc1(features)
        q, k, v = self.w_qs(x), index_points(self.w_ks(x), knn_idx), index_points(self.w_vs(x), knn_idx)
        pos_enc = self.fc_delta(xyz[:, :, None] - knn_xyz)
        attn = self.fc_gamma(q[:, :, None] - k + pos_enc)
        attn = F.softmax(attn / np.sqrt(k.size(-1)), dim=-2)
        res = torch.einsum('bmnf,bmnf->bmf', attn, v + pos_enc)
        res = self.fc2(res) + pre
        return res, attn


class TransitionDown(nn.Module):
    def __init__(self, npoint, nneighbor, channels):
        super().__init__()
        self.npoint, self.nneighbor = npoint, nneighbor
        layers = []
        last = channels[0]
        for out_channel in channels[1:]:
            layers += [nn.Conv2d(last, out_channel, 1), nn.BatchNorm2d(out_channel), nn.ReLU()]
            last = out_channel
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, points):
        fps_idx = farthest_point_sample(xyz, self.npoint)
        new_xyz = index_points(xyz, fps_idx)
        dists = square_distance(new_xyz, xyz)
        idx = dists.argsort()[:, :, :self.nneighbor]
        grouped_xyz_norm = index_points(xyz, idx) - new_xyz.view(xyz.size(0), self.npoint, 1, 3)
        new_points = torch.cat([grouped_xyz_norm, index_points(points, idx)], dim=-1)
        new_points = self.mlp(new_points.permute(0, 3, 2, 1))
        new_points = torch.max(new_points, 2)[0].transpose(1, 2)
        return new_xyz, new_points


class PointTransformerCls(nn.Module):
    def __init__(self, num_class, npoints, nblocks=2, nneighbor=8, d_points=3, transformer_dim=32):
        super().__init__()
        self.fc1 = nn.Sequential(nn.Linear(d_points, 16), nn.ReLU(), nn.Linear(16, 16))
        self.transformer1 = TransformerBlock(16, transformer_dim, nneighbor)
        self.transition_downs, self.transformers = nn.ModuleList(), nn.ModuleList()
        for i in range(nblocks - 1):
            channel = 16 * 2 ** (i + 1)
            self.transition_downs.append(TransitionDown(npoints // 4 ** (i + 1), nneighbor,
                                                        [channel // 2 + 3, channel, channel]))
            self.transformers.append(TransformerBlock(channel, transformer_dim, nneighbor))
        self.fc2 = nn.Sequential(nn.Linear(16 * 2 ** (nblocks - 1), 32), nn.ReLU(), nn.Dropout(0.0),
                                 nn.Linear(32, num_class))
        self.nblocks = nblocks

    def forward(self, x):
        xyz = x[..., :3]
        points = self.transformer1(xyz, self.fc1(x))[0]
        for i in range(self.nblocks - 1):
            xyz, points = self.transition_downs[i](xyz, points)
            points = self.transformers[i](xyz, points)[0]
        return self.fc2(points.mean(1))


rng = np.random.default_rng(0)
num_class, npoints = 4, 32


def make_batch(bs=4):
    labels = rng.integers(0, num_class, bs)
    pts = []
    for c in labels:
        t = rng.uniform(0, 2 * np.pi, npoints)
        shape = np.stack([np.cos(t) * (1 + c), np.sin(t * (1 + c % 2)), np.cos(c * t) * 0.5], 1)
        pts.append(shape + 0.05 * rng.standard_normal((npoints, 3)))
    return torch.from_numpy(np.stack(pts).astype(np.float32)), torch.from_numpy(labels)


def augment(points):
    theta = rng.uniform(0, 2 * np.pi, points.size(0))
    c, s = np.cos(theta), np.sin(theta)
    rot = np.zeros((points.size(0), 3, 3), np.float32)
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1], rot[:, 2, 2] = c, -s, s, c, 1
    points = torch.bmm(points, torch.from_numpy(rot))
    return points + torch.from_numpy(np.clip(0.01 * rng.standard_normal(points.shape), -0.05, 0.05).astype(np.float32))


net = PointTransformerCls(num_class, npoints); sync(net)
model = comp(net, fullgraph=True)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.3)
LOSSES = []
for epoch in range(3):
    net.train()
    points, target = make_batch()
    points = augment(points)
    optimizer.zero_grad()
    pred = model(points)
    loss = criterion(pred, target.long())
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES.append(loss.item())
net.eval()
with torch.no_grad():
    points, target = make_batch(3)
    pred = model(points)
    LOSSES += [criterion(pred, target).item(), pred.softmax(-1).max(1)[0].sum().item()]
