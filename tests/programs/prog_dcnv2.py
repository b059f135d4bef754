from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Deformable convolution v2 written by hand, as repositories without the CUDA op do: a conv
# predicts 2*k*k offsets and k*k modulation masks (zero-initialized, masks through sigmoid),
# sampling locations are the output grid (torch.meshgrid) plus each tap's displacement plus
# its offset, normalized to [-1, 1] for F.grid_sample (bilinear, zeros padding,
# align_corners=True) once per kernel tap, each sample scaled by its mask, then the taps
# mixed by an einsum with the (out, in, k*k) weight. Two deformable blocks (one strided) in
# a small encoder-decoder segmenting shapes in noise, under per-pixel cross-entropy with an
# ignore index, SGD with Nesterov momentum and a poly learning-rate schedule; mean IoU by
# bincount of the confusion matrix.
class DeformConv2d(nn.Module):
    def __init__(self, inc, outc, kernel_size=3, padding=1, stride=1, bias=True):
        super().__init__()
        self.kernel_size, self.padding, self.stride = kernel_size, padding, stride
        k2 = kernel_size * kernel_size
        self.weight = nn.Parameter(torch.empty(outc, inc, k2))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.bias = nn.Parameter(torch.zeros(outc)) if bias else None
        self.p_conv = nn.Conv2d(inc, 2 * k2, 3, padding=1, stride=stride)
        self.m_conv = nn.Conv2d(inc, k2, 3, padding=1, stride=stride)
        for conv in (self.p_conv, self.m_conv):
            nn.init.constant_(conv.weight, 0)
            nn.init.constant_(conv.bias, 0)

    def _taps(self, dtype):
        r = torch.arange(-(self.kernel_size - 1) // 2, (self.kernel_size - 1) // 2 + 1, dtype=dtype)
        ky, kx = torch.meshgrid(r, r, indexing="ij")
        return ky.reshape(-1), kx.reshape(-1)

    def forward(self, x):
        b, c, h, w = x.shape
        offset = self.p_conv(x)                      # (b, 2*k2, ho, wo): (dy, dx) per tap
        mask = torch.sigmoid(self.m_conv(x))         # (b, k2, ho, wo)
        ho, wo = offset.shape[-2:]
        k2 = mask.shape[1]
        ys = torch.arange(ho, dtype=x.dtype) * self.stride
        xs = torch.arange(wo, dtype=x.dtype) * self.stride
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        ky, kx = self._taps(x.dtype)
        samples = []
        for k in range(k2):
            py = gy + ky[k] + offset[:, 2 * k]       # (b, ho, wo) in input pixels
            px = gx + kx[k] + offset[:, 2 * k + 1]
            grid = torch.stack([2 * px / max(w - 1, 1) - 1, 2 * py / max(h - 1, 1) - 1], dim=-1)
            s = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
            samples.append(s * mask[:, k:k + 1])
        cols = torch.stack(samples, dim=2)           # (b, c, k2, ho, wo)
        out = torch.einsum("bckhw,ock->bohw", cols, self.weight)
        if self.bias is not None:
            out = out + self.bias.view(1, -1, 1, 1)
        return out


class SegNet(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.dcn1 = DeformConv2d(8, 12, stride=2)
        self.bn1 = nn.BatchNorm2d(12)
        self.dcn2 = DeformConv2d(12, 12)
        self.bn2 = nn.BatchNorm2d(12)
        self.head = nn.Conv2d(12 + 8, n_classes, 1)

    def forward(self, x):
        f0 = self.stem(x)
        f1 = F.relu(self.bn1(self.dcn1(f0)))
        f1 = F.relu(self.bn2(self.dcn2(f1))) + f1
        up = F.interpolate(f1, size=f0.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([up, f0], 1))


def batch(rng, n=4, size=16):
    """Discs (class 1) and squares (class 2) in noise; border pixels ignored (255)."""
    img = rng.normal(0, 0.3, (n, 1, size, size)).astype(np.float32)
    lab = np.zeros((n, size, size), np.int64)
    yy, xx = np.mgrid[:size, :size]
    for i in range(n):
        cy, cx, r = rng.integers(4, size - 4, 2).tolist() + [int(rng.integers(2, 4))]
        if rng.random() < 0.5:
            m = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r; lab[i][m] = 1
        else:
            m = (abs(yy - cy) <= r) & (abs(xx - cx) <= r); lab[i][m] = 2
        img[i, 0][m] += 1.0
    lab[:, 0, :] = 255
    return torch.from_numpy(img), torch.from_numpy(lab)


def mean_iou(pred, target, n=3):
    keep = target != 255
    hist = torch.bincount(n * target[keep] + pred[keep], minlength=n * n).reshape(n, n).float()
    iou = hist.diag() / (hist.sum(0) + hist.sum(1) - hist.diag()).clamp(min=1)
    return iou.mean()


model = SegNet(); sync(model)
with torch.no_grad():   # offsets and masks off their zero init, so that the sampling is deformed
    r = np.random.default_rng(1)
    for dcn in (model.dcn1, model.dcn2):
        dcn.p_conv.weight.copy_(torch.from_numpy(r.normal(0, 0.1, dcn.p_conv.weight.shape).astype(np.float32)))
        dcn.m_conv.bias.copy_(torch.from_numpy(r.normal(0, 0.5, dcn.m_conv.bias.shape).astype(np.float32)))
net = comp(model)
base_lr, iters = 0.05, 5
optimizer = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
criterion = nn.CrossEntropyLoss(ignore_index=255)
rng = np.random.default_rng(0)
LOSSES = []
for it in range(iters):
    lr = base_lr * (1 - it / iters) ** 0.9
    for g in optimizer.param_groups:
        g["lr"] = lr
    img, lab = batch(rng)
    model.train()
    out = net(img)
    loss = criterion(out, lab)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES += [loss.item(), model.dcn1.p_conv.weight.grad.abs().sum().item()]
model.eval()
with torch.no_grad():
    img, lab = batch(rng, n=6)
    out = net(img)
    pred = out.argmax(1)
    LOSSES += [F.cross_entropy(out, lab, ignore_index=255).item(), mean_iou(pred, lab).item(),
               model.bn1.running_var.sum().item()]
