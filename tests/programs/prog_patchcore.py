from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A small ResNet pretrained by SimSiam (Chen & He 2021, as facebookresearch/simsiam writes
# it: a projector ending in an affine-free BatchNorm, a bottleneck predictor, the
# stop-gradient by detach, negative cosine similarity, SGD whose predictor group keeps a
# fixed lr while the others follow a hand-set cosine schedule), then used as PatchCore's
# frozen extractor (Roth et al. 2022, as anomalib writes it): forward hooks keep layer2 and
# layer3 maps in a dict, 3x3 average-pooled neighbourhoods, layer3 resized to layer2 by
# bilinear interpolate, patches flattened, a memory bank subsampled by the greedy k-center
# coreset on a random projection, nearest-neighbour scores by torch.cdist + topk(largest=False)
# under no_grad compiled fullgraph=True, anomaly maps upsampled and blurred by a Gaussian
# conv2d, image scores re-weighted by the softmax over the support's distances, and an
# AUROC by ranks. Views are flips, crops by roll and noise drawn by numpy (the two
# frameworks draw different streams).


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetTiny(nn.Module):
    def __init__(self, num_classes=32, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.layer3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SimSiam(nn.Module):
    def __init__(self, base_encoder, dim=32, pred_dim=8):
        super().__init__()
        self.encoder = base_encoder
        prev_dim = self.encoder.fc.weight.shape[1]
        self.encoder.fc = nn.Sequential(nn.Linear(prev_dim, prev_dim, bias=False), nn.BatchNorm1d(prev_dim),
                                        nn.ReLU(inplace=True),
                                        self.encoder.fc,
                                        nn.BatchNorm1d(dim, affine=False))
        self.encoder.fc[3].bias.requires_grad = False   # the projector's last bias is dropped (BN follows)
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim, bias=False), nn.BatchNorm1d(pred_dim),
                                       nn.ReLU(inplace=True), nn.Linear(pred_dim, dim))

    def forward(self, x1, x2):
        z1 = self.encoder(x1)
        z2 = self.encoder(x2)
        p1 = self.predictor(z1)
        p2 = self.predictor(z2)
        return p1, p2, z1.detach(), z2.detach()


def make_images(rng, n, anomalous=None):
    """Textures of stripes; an anomaly is a bright blob."""
    yy, xx = np.mgrid[:16, :16]
    imgs = np.zeros((n, 3, 16, 16), np.float32)
    for i in range(n):
        phase = rng.uniform(0, 2 * np.pi)
        imgs[i] = np.sin(xx * 0.8 + phase)[None] * np.array([1.0, 0.5, -0.5])[:, None, None]
        if anomalous is not None and anomalous[i]:
            cy, cx = rng.integers(3, 13, 2)
            imgs[i, :, (yy - cy) ** 2 + (xx - cx) ** 2 < 6] += 2.0
    imgs += 0.1 * rng.standard_normal(imgs.shape).astype(np.float32)
    return torch.from_numpy(imgs)


def augment(x, rng):
    flip = torch.from_numpy(rng.random(x.shape[0]) < 0.5)[:, None, None, None]
    x = torch.where(flip, x.flip(3), x)
    x = torch.roll(x, shifts=(int(rng.integers(-2, 3)), int(rng.integers(-2, 3))), dims=(2, 3))
    return x + 0.1 * torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))


def adjust_learning_rate(optimizer, init_lr, epoch, epochs):
    cur_lr = init_lr * 0.5 * (1. + np.cos(np.pi * epoch / epochs))
    for param_group in optimizer.param_groups:
        if 'fix_lr' in param_group and param_group['fix_lr']:
            param_group['lr'] = init_lr
        else:
            param_group['lr'] = cur_lr


rng = np.random.default_rng(0)
simsiam = SimSiam(ResNetTiny()); sync(simsiam)
model = comp(simsiam, fullgraph=True)
criterion = nn.CosineSimilarity(dim=1)
optim_params = [{'params': simsiam.encoder.parameters(), 'fix_lr': False},
                {'params': simsiam.predictor.parameters(), 'fix_lr': True}]
init_lr = 0.05 * 16 / 256
optimizer = torch.optim.SGD(optim_params, init_lr, momentum=0.9, weight_decay=1e-4)
LOSSES = []
train_images = make_images(rng, 16)
simsiam.train()
for epoch in range(3):
    adjust_learning_rate(optimizer, init_lr, epoch, 3)
    x1, x2 = augment(train_images, rng), augment(train_images, rng)
    p1, p2, z1, z2 = model(x1, x2)
    loss = -(criterion(p1, z2).mean() + criterion(p2, z1).mean()) * 0.5
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss.item(), z1.std(dim=0).mean().item()]

# PatchCore on the pretrained encoder
backbone = simsiam.encoder
backbone.eval()
for p in backbone.parameters():
    p.requires_grad_(False)
features = {}


def hook(name):
    def fn(module, inputs, output):
        features[name] = output
    return fn


handles = [backbone.layer2.register_forward_hook(hook("layer2")),
           backbone.layer3.register_forward_hook(hook("layer3"))]
extractor = comp(backbone, fullgraph=True)


def embed(images):
    features.clear()
    with torch.no_grad():
        extractor(images)
    maps = [F.avg_pool2d(features[k], 3, 1, 1) for k in ("layer2", "layer3")]
    maps[1] = F.interpolate(maps[1], size=maps[0].shape[-2:], mode="bilinear", align_corners=False)
    embedding = torch.cat(maps, 1)
    b, c, h, w = embedding.shape
    return embedding.permute(0, 2, 3, 1).reshape(-1, c), (b, h, w)


def greedy_coreset(embedding, n, proj_dim=8):
    projector = torch.from_numpy(rng.standard_normal((embedding.shape[1], proj_dim)).astype(np.float32))
    features_p = embedding @ projector / np.sqrt(proj_dim)
    idx = int(rng.integers(0, features_p.shape[0]))
    min_distances = torch.linalg.norm(features_p - features_p[idx:idx + 1], dim=1, keepdim=True)
    selected = [idx]
    for _ in range(n - 1):
        idx = int(torch.argmax(min_distances).item())
        selected.append(idx)
        distance = torch.linalg.norm(features_p - features_p[idx:idx + 1], dim=1, keepdim=True)
        min_distances = torch.minimum(distance, min_distances)
    return embedding[torch.tensor(selected)]


def nearest_neighbors(embedding, memory_bank, n_neighbors: int):
    distances = torch.cdist(embedding, memory_bank, p=2.0)
    patch_scores, locations = distances.topk(k=n_neighbors, largest=False, dim=1)
    return patch_scores, locations


knn = comp(nearest_neighbors, fullgraph=True)


def gaussian_blur(x, sigma=1.0, ks=5):
    ax = torch.arange(ks, dtype=torch.float32) - ks // 2
    k1 = torch.exp(-ax ** 2 / (2 * sigma ** 2))
    k1 = k1 / k1.sum()
    kernel = (k1[:, None] * k1[None, :])[None, None]
    return F.conv2d(F.pad(x, (ks // 2,) * 4, mode="reflect"), kernel)


memory_embedding, _ = embed(make_images(rng, 8))
memory_bank = greedy_coreset(memory_embedding, 48)
labels = np.array([0, 1, 0, 1, 1, 0, 0, 1])
test_images = make_images(rng, 8, anomalous=labels)
test_embedding, (b, h, w) = embed(test_images)
with torch.no_grad():
    patch_scores, locations = knn(test_embedding, memory_bank, 1)
    patch_scores = patch_scores[:, 0].reshape(b, h * w)
    locations = locations[:, 0].reshape(b, h * w)
    max_patches = torch.argmax(patch_scores, dim=1)
    score = patch_scores[torch.arange(b), max_patches]
    nn_sample = memory_bank[locations[torch.arange(b), max_patches], :]
    _, support = knn(nn_sample, memory_bank, 3)
    max_feats = test_embedding.reshape(b, h * w, -1)[torch.arange(b), max_patches]
    distances = torch.linalg.norm(max_feats[:, None] - memory_bank[support], dim=2)
    weights = (1 - F.softmax(distances, 1))[..., 0]
    pred_score = weights * score
    anomaly_map = F.interpolate(patch_scores.reshape(b, 1, h, w), size=(16, 16), mode="bilinear",
                                align_corners=False)
    anomaly_map = gaussian_blur(anomaly_map)
ranks = torch.argsort(torch.argsort(pred_score)).float() + 1
pos = torch.from_numpy(labels).bool()
n_pos, n_neg = int(pos.sum()), int((~pos).sum())
auroc = (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
LOSSES += pred_score.tolist() + [anomaly_map.amax().item(), anomaly_map.mean().item(), auroc.item()]
for handle in handles:
    handle.remove()
