from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# PointNet++ SSG classification as Pointnet_Pointnet2_pytorch writes it: farthest point
# sampling by a Python loop of argmax over running min distances (started at point 0, as the
# CUDA op does), ball query by masking an arange with N where the squared distance exceeds
# the radius, sorting and padding with each group's first index, neighbourhoods gathered by
# index_points' batch-index advanced indexing, shared MLPs of 1x1 Conv2d + BatchNorm2d, max
# over the neighbours, a group-all layer; provider.py's augmentations in numpy; Adam under
# StepLR, nll_loss on log_softmax, compiled with fullgraph=True
def square_distance(src, dst):
    B, N, _ = src.shape
    _, M, _ = dst.shape
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src ** 2, -1).view(B, N, 1)
    dist += torch.sum(dst ** 2, -1).view(B, 1, M)
    return dist
def index_points(points, idx):
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]
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
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids
def query_ball_point(radius, nsample, xyz, new_xyz):
    B, N, C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius ** 2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]
    return group_idx
def sample_and_group(npoint, radius, nsample, xyz, points):
    B, N, C = xyz.shape
    S = npoint
    fps_idx = farthest_point_sample(xyz, npoint)
    new_xyz = index_points(xyz, fps_idx)
    idx = query_ball_point(radius, nsample, xyz, new_xyz)
    grouped_xyz = index_points(xyz, idx)
    grouped_xyz_norm = grouped_xyz - new_xyz.view(B, S, 1, C)
    if points is not None:
        new_points = torch.cat([grouped_xyz_norm, index_points(points, idx)], dim=-1)
    else:
        new_points = grouped_xyz_norm
    return new_xyz, new_points
def sample_and_group_all(xyz, points):
    B, N, C = xyz.shape
    new_xyz = torch.zeros(B, 1, C)
    grouped_xyz = xyz.view(B, 1, N, C)
    new_points = torch.cat([grouped_xyz, points.view(B, 1, N, -1)], dim=-1)
    return new_xyz, new_points
class PointNetSetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp, group_all):
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            last_channel = out_channel
        self.group_all = group_all
    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        if points is not None:
            points = points.permute(0, 2, 1)
        if self.group_all:
            new_xyz, new_points = sample_and_group_all(xyz, points)
        else:
            new_xyz, new_points = sample_and_group(self.npoint, self.radius, self.nsample, xyz, points)
        new_points = new_points.permute(0, 3, 2, 1)  # [B, C+D, nsample, npoint]
        for i, conv in enumerate(self.mlp_convs):
            bn = self.mlp_bns[i]
            new_points = F.relu(bn(conv(new_points)))
        new_points = torch.max(new_points, 2)[0]
        new_xyz = new_xyz.permute(0, 2, 1)
        return new_xyz, new_points
class get_model(nn.Module):
    def __init__(self, num_class):
        super().__init__()
        self.sa1 = PointNetSetAbstraction(npoint=32, radius=0.4, nsample=8, in_channel=3, mlp=[16, 16, 32], group_all=False)
        self.sa2 = PointNetSetAbstraction(npoint=8, radius=0.8, nsample=8, in_channel=32 + 3, mlp=[32, 32, 64], group_all=False)
        self.sa3 = PointNetSetAbstraction(npoint=None, radius=None, nsample=None, in_channel=64 + 3, mlp=[64, 128], group_all=True)
        self.fc1 = nn.Linear(128, 64)
        self.bn1 = nn.BatchNorm1d(64)
        self.drop1 = nn.Dropout(0.0)
        self.fc2 = nn.Linear(64, num_class)
    def forward(self, xyz):
        B, _, _ = xyz.shape
        l1_xyz, l1_points = self.sa1(xyz, None)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        l3_xyz, l3_points = self.sa3(l2_xyz, l2_points)
        x = l3_points.view(B, 128)
        x = self.drop1(F.relu(self.bn1(self.fc1(x))))
        x = self.fc2(x)
        x = F.log_softmax(x, -1)
        return x, l3_points
class get_loss(nn.Module):
    def forward(self, pred, target, trans_feat):
        return F.nll_loss(pred, target)
def pc_normalize(pc):
    pc = pc - np.mean(pc, axis=0)
    return pc / np.max(np.sqrt(np.sum(pc ** 2, axis=1)))
def make_shape(rng, label, n):
    """A sphere, a cube's surface or a cylinder, randomly stretched."""
    if label == 0:
        p = rng.normal(size=(n, 3)); p /= np.linalg.norm(p, axis=1, keepdims=True)
    elif label == 1:
        p = rng.uniform(-1, 1, (n, 3)); ax = rng.integers(0, 3, n); p[np.arange(n), ax] = np.sign(rng.normal(size=n))
    else:
        t = rng.uniform(0, 2 * np.pi, n); p = np.stack([np.cos(t), np.sin(t), rng.uniform(-1, 1, n)], 1)
    return pc_normalize((p * rng.uniform(0.7, 1.3, 3)).astype(np.float32))
def random_scale_point_cloud(batch_data, rng, scale_low=0.8, scale_high=1.25):
    B, N, C = batch_data.shape
    scales = rng.uniform(scale_low, scale_high, B)
    for batch_index in range(B):
        batch_data[batch_index, :, :] *= scales[batch_index]
    return batch_data
def shift_point_cloud(batch_data, rng, shift_range=0.1):
    B, N, C = batch_data.shape
    shifts = rng.uniform(-shift_range, shift_range, (B, 3))
    for batch_index in range(B):
        batch_data[batch_index, :, :] += shifts[batch_index, :]
    return batch_data
rng = np.random.default_rng(0)
num_class, npts = 3, 64
labels = rng.integers(0, num_class, 48)
data = np.stack([make_shape(rng, int(l), npts) for l in labels])
classifier = get_model(num_class); sync(classifier)
criterion = get_loss()
model = comp(classifier, fullgraph=True)
optimizer = torch.optim.Adam(classifier.parameters(), lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
LOSSES = []
for epoch in range(3):
    classifier = classifier.train()
    order = rng.permutation(len(data))
    for it in range(0, len(data), 16):
        points = data[order[it:it + 16]].copy()
        points[:, :, 0:3] = random_scale_point_cloud(points[:, :, 0:3], rng)
        points[:, :, 0:3] = shift_point_cloud(points[:, :, 0:3], rng)
        points = torch.Tensor(points)
        target = torch.from_numpy(labels[order[it:it + 16]])
        points = points.transpose(2, 1)
        optimizer.zero_grad()
        pred, trans_feat = model(points)
        loss = criterion(pred, target.long(), trans_feat)
        pred_choice = pred.data.max(1)[1]
        correct = pred_choice.eq(target.long().data).cpu().sum()
        loss.backward()
        optimizer.step()
        LOSSES += [loss.item(), correct.item()]
    scheduler.step()
with torch.no_grad():
    classifier = classifier.eval()
    pred, _ = model(torch.Tensor(data[:16]).transpose(2, 1))
    LOSSES += [F.nll_loss(pred, torch.from_numpy(labels[:16])).item()]
