from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
def knn(x, k):
    # x: (B, C, N)
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x ** 2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)
    return pairwise_distance.topk(k=k, dim=-1)[1]
def knn_cdist(x, k):
    d = torch.cdist(x.transpose(1, 2), x.transpose(1, 2))
    return d.topk(k, dim=-1, largest=False).indices
def get_graph_feature(x, k=8, idx=None):
    batch_size, num_dims, num_points = x.size()
    if idx is None:
        idx = knn_cdist(x, k=k)
    idx_base = torch.arange(0, batch_size).view(-1, 1, 1) * num_points
    idx = (idx + idx_base).view(-1)
    x = x.transpose(2, 1).contiguous()
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)
    return torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()
class DGCNN(nn.Module):
    def __init__(self, k=8, emb=64, output_channels=5):
        super().__init__()
        self.k = k
        self.conv1 = nn.Sequential(nn.Conv2d(6, 16, kernel_size=1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(negative_slope=0.2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 16, kernel_size=1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(negative_slope=0.2))
        self.conv3 = nn.Sequential(nn.Conv1d(32, emb, kernel_size=1, bias=False), nn.BatchNorm1d(emb), nn.LeakyReLU(negative_slope=0.2))
        self.linear1 = nn.Linear(emb * 2, 32, bias=False); self.bn6 = nn.BatchNorm1d(32)
        self.linear2 = nn.Linear(32, output_channels)
    def forward(self, x):
        batch_size = x.size(0)
        x = get_graph_feature(x, k=self.k)
        x = self.conv1(x)
        x1 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x1, k=self.k)
        x = self.conv2(x)
        x2 = x.max(dim=-1, keepdim=False)[0]
        x = torch.cat((x1, x2), dim=1)
        x = self.conv3(x)
        a = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        b = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = torch.cat((a, b), 1)
        x = F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2)
        return self.linear2(x)
def cal_loss(pred, gold, smoothing=True):
    gold = gold.contiguous().view(-1)
    if smoothing:
        eps = 0.2; n_class = pred.size(1)
        one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
        one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
        log_prb = F.log_softmax(pred, dim=1)
        return -(one_hot * log_prb).sum(dim=1).mean()
    return F.cross_entropy(pred, gold, reduction="mean")
model = DGCNN(); sync(model)
net = comp(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10, eta_min=1e-3)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    model.train()
    pts = r.standard_normal((4, 64, 3)).astype(np.float32)
    pts = pts / np.linalg.norm(pts, axis=2, keepdims=True) * r.uniform(0.5, 1.0, (4, 1, 1)).astype(np.float32)
    data = torch.from_numpy(pts).permute(0, 2, 1)
    label = torch.from_numpy(r.integers(0, 5, (4, 1)))
    logits = net(data)
    loss = cal_loss(logits, label)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    LOSSES += model(data).softmax(1).max(1)[0].tolist()
    x = data
    i1 = knn(x, 8); i2 = knn_cdist(x, 8)
    LOSSES.append(float((torch.sort(i1, -1)[0] == torch.sort(i2, -1)[0]).float().mean() > 0.9))
