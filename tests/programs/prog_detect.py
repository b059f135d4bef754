from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
def make_anchors(fh, fw, stride, sizes=(8., 16.), ratios=(0.5, 1.0, 2.0)):
    base = []
    for s in sizes:
        for r_ in ratios:
            w = s * r_ ** 0.5; h = s / r_ ** 0.5
            base.append([-w / 2, -h / 2, w / 2, h / 2])
    base = torch.tensor(base)                                  # (A, 4)
    sy, sx = torch.meshgrid(torch.arange(fh, dtype=torch.float32), torch.arange(fw, dtype=torch.float32), indexing="ij")
    shifts = torch.stack([sx, sy, sx, sy], dim=-1).reshape(-1, 1, 4) * stride + stride / 2
    return (shifts + base[None]).reshape(-1, 4)
def box_area(b): return (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2]); rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0); inter = wh[..., 0] * wh[..., 1]
    return inter / (box_area(a)[:, None] + box_area(b)[None] - inter)
def encode(anchors, gt):
    aw = anchors[:, 2] - anchors[:, 0]; ah = anchors[:, 3] - anchors[:, 1]
    ax = anchors[:, 0] + 0.5 * aw; ay = anchors[:, 1] + 0.5 * ah
    gw = gt[:, 2] - gt[:, 0]; gh = gt[:, 3] - gt[:, 1]
    gx = gt[:, 0] + 0.5 * gw; gy = gt[:, 1] + 0.5 * gh
    return torch.stack([(gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw), torch.log(gh / ah)], dim=1)
def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="sum"):
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    loss = alpha_t * loss
    return loss.sum() if reduction == "sum" else loss.mean()
class Head(nn.Module):
    def __init__(self, num_classes=3, num_anchors=6, c=16):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, c, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(c, c, 3, stride=2, padding=1), nn.ReLU())
        self.cls = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, num_anchors * num_classes, 3, padding=1))
        self.reg = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.Conv2d(c, num_anchors * 4, 3, padding=1))
        self.num_classes = num_classes
        nn.init.constant_(self.cls[-1].bias, -4.59)   # prior 0.01
    def forward(self, x):
        f = self.backbone(x); N = x.shape[0]
        cls = self.cls(f).permute(0, 2, 3, 1).reshape(N, -1, self.num_classes)
        reg = self.reg(f).permute(0, 2, 3, 1).reshape(N, -1, 4)
        return cls, reg
model = Head(); sync(model)
net = comp(model)
anchors = make_anchors(8, 8, 4.0)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
r = np.random.default_rng(0)
LOSSES = []
def targets_for(gt_boxes, gt_labels):
    iou = box_iou(anchors, gt_boxes)                    # (A, G)
    max_iou, idx = iou.max(dim=1)
    # every gt box gets at least its best anchor
    best = iou.argmax(dim=0)
    max_iou[best] = 1.0; idx[best] = torch.arange(len(gt_boxes))
    pos = max_iou >= 0.5; neg = max_iou < 0.4
    cls_t = torch.zeros(len(anchors), 3)
    cls_t[pos, gt_labels[idx[pos]]] = 1.0
    valid = pos | neg
    return cls_t, valid, pos, gt_boxes[idx]
for step in range(4):
    x = torch.from_numpy(r.standard_normal((2, 3, 32, 32)).astype(np.float32))
    cls_out, reg_out = net(x)
    total = 0.0
    for b in range(2):
        n = int(r.integers(1, 4))
        xy = r.uniform(0, 22, (n, 2)); wh = r.uniform(6, 14, (n, 2))
        gt = torch.from_numpy(np.concatenate([xy, np.minimum(xy + wh, 32)], 1).astype(np.float32))
        labels = torch.from_numpy(r.integers(0, 3, n))
        cls_t, valid, pos, matched = targets_for(gt, labels)
        num_pos = max(1, int(pos.sum()))
        l_cls = sigmoid_focal_loss(cls_out[b][valid], cls_t[valid]) / num_pos
        reg_t = encode(anchors[pos], matched[pos])
        l_reg = F.smooth_l1_loss(reg_out[b][pos], reg_t, beta=1.0 / 9, reduction="sum") / num_pos
        total = total + l_cls + l_reg
    loss = total / 2
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    cls_out, reg_out = model(x)
    scores = torch.sigmoid(cls_out[0]).flatten()
    top, order = scores.topk(20)
    keep = top > 0.005
    sorted_scores, _ = torch.sort(top[keep], descending=True)
    ai = order // 3
    boxes = torch.where(keep[:, None], anchors[ai], torch.zeros_like(anchors[ai])).clamp(0, 32)
    LOSSES += [top.sum().item(), sorted_scores[:5].sum().item(), boxes.sum().item(), box_iou(boxes, boxes).trace().item()]
