"""A one-stage detector's training step (RetinaNet-style), as detection tutorials write
the head, the anchor matching and the losses by hand.

A small conv backbone (stride 4) on 64x64 images, batch 8; class and box heads over 16x16
cells with 9 anchors each (2304 anchors, 5 classes). Per image: 1-4 ground-truth boxes,
IoU of every anchor with them (hand-written ``box_iou``), positives by ``max`` and a
threshold plus each box's best anchor, sigmoid focal loss over the anchors that are not
ignored and smooth L1 on the positives' encoded offsets, both selected by boolean masks
(their counts change every step); SGD with momentum. Compiled: the network.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "detect"
BATCH, SIZE, CLASSES, WIDTH, STRIDE = 8, 64, 5, 32, 4


def make_anchors(fh, fw, stride, sizes=(8., 12., 16.), ratios=(0.5, 1.0, 2.0)):
    base = []
    for s in sizes:
        for ratio in ratios:
            w, h = s * ratio ** 0.5, s / ratio ** 0.5
            base.append([-w / 2, -h / 2, w / 2, h / 2])
    base = torch.tensor(base)
    sy, sx = torch.meshgrid(torch.arange(fh, dtype=torch.float32), torch.arange(fw, dtype=torch.float32),
                            indexing="ij")
    shifts = torch.stack([sx, sy, sx, sy], dim=-1).reshape(-1, 1, 4) * stride + stride / 2
    return (shifts + base[None]).reshape(-1, 4)


def box_area(b):
    return (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)


def box_iou(a, b):
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (box_area(a)[:, None] + box_area(b)[None] - inter)


def encode(anchors, gt):
    aw, ah = anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]
    ax, ay = anchors[:, 0] + 0.5 * aw, anchors[:, 1] + 0.5 * ah
    gw, gh = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    gx, gy = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return torch.stack([(gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw), torch.log(gh / ah)], dim=1)


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0):
    p = torch.sigmoid(inputs)
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return (alpha_t * loss).sum()


def conv_block(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.ReLU())


class Detector(nn.Module):
    def __init__(self, num_anchors=9):
        super().__init__()
        self.backbone = nn.Sequential(conv_block(3, WIDTH, 2), conv_block(WIDTH, WIDTH), conv_block(WIDTH, WIDTH, 2))
        self.cls_head = nn.Sequential(conv_block(WIDTH, WIDTH), nn.Conv2d(WIDTH, num_anchors * CLASSES, 3, padding=1))
        self.box_head = nn.Sequential(conv_block(WIDTH, WIDTH), nn.Conv2d(WIDTH, num_anchors * 4, 3, padding=1))

    def forward(self, x):
        f = self.backbone(x)
        n = x.shape[0]
        cls = self.cls_head(f).permute(0, 2, 3, 1).reshape(n, -1, CLASSES)
        box = self.box_head(f).permute(0, 2, 3, 1).reshape(n, -1, 4)
        return cls, box


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = Detector()
        load_params(NAME, self.model)
        with torch.no_grad():
            self.model.cls_head[-1].bias.fill_(-4.59)      # prior probability 0.01
        self.anchors = make_anchors(SIZE // STRIDE, SIZE // STRIDE, float(STRIDE))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        self.forward = compile(self.model)

    def targets(self, gt_boxes, gt_labels):
        iou = box_iou(self.anchors, gt_boxes)
        max_iou, idx = iou.max(dim=1)
        best = iou.argmax(dim=0)
        max_iou[best] = 1.0
        idx[best] = torch.arange(len(gt_boxes))
        pos, neg = max_iou >= 0.5, max_iou < 0.4
        cls_t = torch.zeros(len(self.anchors), CLASSES)
        cls_t[pos, gt_labels[idx[pos]]] = 1.0
        return cls_t, pos | neg, pos, gt_boxes[idx]

    def step(self) -> float:
        r = self.r
        x = torch.from_numpy(r.standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32))
        cls_out, box_out = self.forward(x)
        total = 0.0
        for b in range(BATCH):
            n = int(r.integers(1, 5))
            xy = r.uniform(0, SIZE - 20, (n, 2))
            wh = r.uniform(8, 24, (n, 2))
            gt = torch.from_numpy(np.concatenate([xy, np.minimum(xy + wh, SIZE)], 1).astype(np.float32))
            labels = torch.from_numpy(r.integers(0, CLASSES, n))
            cls_t, valid, pos, matched = self.targets(gt, labels)
            num_pos = max(1, int(pos.sum()))
            l_cls = sigmoid_focal_loss(cls_out[b][valid], cls_t[valid]) / num_pos
            l_box = F.smooth_l1_loss(box_out[b][pos], encode(self.anchors[pos], matched[pos]), beta=1.0 / 9,
                                     reduction="sum") / num_pos
            total = total + l_cls + l_box
        loss = total / BATCH
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
