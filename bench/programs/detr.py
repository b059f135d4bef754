"""DETR's set prediction as its demo writes the model and its repository the criterion.

Batch 8 of 64x64 images with 1-4 boxes each: a conv backbone (stride 4, BatchNorm), a 1x1
projection to width 64, learned row/column positional embeddings, ``nn.Transformer``
(3 encoder and 3 decoder layers, 4 heads) between the 256 flattened positions and 16
learned queries, class and 3-layer box heads. The Hungarian matcher's costs (softmax
probabilities, ``cdist(p=1)``, generalized IoU) go to numpy for a Python assignment;
cross-entropy with a down-weighted no-object class, L1 and GIoU on the matched pairs,
``clip_grad_norm_``, AdamW. Compiled: the model.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "detr"
BATCH, HIDDEN, QUERIES, CLASSES = 8, 64, 16, 4


def cxcywh_to_xyxy(x):
    cx, cy, w, h = x.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def generalized_box_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    inter = (torch.min(a[:, None, 2:], b[:, 2:]) - torch.max(a[:, None, :2], b[:, :2])).clamp(min=0).prod(-1)
    union = area_a[:, None] + area_b - inter
    hull = (torch.max(a[:, None, 2:], b[:, 2:]) - torch.min(a[:, None, :2], b[:, :2])).clamp(min=0).prod(-1)
    return inter / union - (hull - union) / hull


def linear_sum_assignment(cost):
    """Shortest augmenting paths with potentials; rows >= columns; (rows, cols) by row."""
    c = np.asarray(cost, dtype=np.float64).T
    n, m = c.shape
    u, v, p, way = np.zeros(n + 1), np.zeros(m + 1), np.zeros(m + 1, np.int64), np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = np.full(m + 1, np.inf), np.zeros(m + 1, bool)
        while True:
            used[j0] = True
            i0, free = p[j0], ~used[1:]
            cur = c[i0 - 1] - u[i0] - v[1:]
            better = free & (cur < minv[1:])
            minv[1:][better], way[1:][better] = cur[better], j0
            j1 = 1 + int(np.argmin(np.where(free, minv[1:], np.inf)))
            delta = minv[j1]
            u[p[used]] += delta; v[used] -= delta; minv[~used] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]; p[j0] = p[j1]; j0 = j1
    pairs = sorted((j - 1, p[j] - 1) for j in range(1, m + 1) if p[j])
    return np.array([q for q, _ in pairs], np.int64), np.array([t for _, t in pairs], np.int64)


class DETR(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
                                      nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        self.conv = nn.Conv2d(64, HIDDEN, 1)
        self.transformer = nn.Transformer(HIDDEN, 4, 3, 3, dim_feedforward=128, dropout=0.0)
        self.linear_class = nn.Linear(HIDDEN, CLASSES + 1)
        self.linear_bbox = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                                         nn.Linear(HIDDEN, 4))
        self.query_pos = nn.Parameter(torch.rand(QUERIES, HIDDEN))
        self.row_embed = nn.Parameter(torch.rand(50, HIDDEN // 2))
        self.col_embed = nn.Parameter(torch.rand(50, HIDDEN // 2))

    def forward(self, inputs):
        h = self.conv(self.backbone(inputs))
        H, W = h.shape[-2:]
        pos = torch.cat([self.col_embed[:W].unsqueeze(0).repeat(H, 1, 1),
                         self.row_embed[:H].unsqueeze(1).repeat(1, W, 1)], dim=-1).flatten(0, 1).unsqueeze(1)
        h = self.transformer(pos + 0.1 * h.flatten(2).permute(2, 0, 1),
                             self.query_pos.unsqueeze(1).repeat(1, inputs.shape[0], 1)).transpose(0, 1)
        return self.linear_class(h), self.linear_bbox(h).sigmoid()


class Program:
    def __init__(self, compile):
        self.r = rng(NAME)
        self.model = DETR()
        load_params(NAME, self.model)
        self.net = compile(self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=1e-4)
        self.empty_weight = torch.ones(CLASSES + 1)
        self.empty_weight[-1] = 0.1

    def batch(self):
        imgs = self.r.standard_normal((BATCH, 3, 64, 64)).astype(np.float32) * 0.1
        labels, boxes = [], []
        for b in range(BATCH):
            n = int(self.r.integers(1, 5))
            lab, xy, wh = self.r.integers(0, CLASSES, n), self.r.integers(0, 40, (n, 2)), self.r.integers(8, 24, (n, 2))
            for k in range(n):
                imgs[b, lab[k] % 3, xy[k, 1]:xy[k, 1] + wh[k, 1], xy[k, 0]:xy[k, 0] + wh[k, 0]] += 1.0
            labels.append(torch.from_numpy(lab))
            boxes.append(torch.from_numpy(np.concatenate([xy + wh / 2, wh], 1).astype(np.float32) / 64))
        return torch.from_numpy(imgs), labels, boxes

    def step(self) -> float:
        images, labels, boxes = self.batch()
        logits, pred_boxes = self.net(images)
        with torch.no_grad():   # the Hungarian matcher
            prob, out_bbox = logits.flatten(0, 1).softmax(-1), pred_boxes.flatten(0, 1)
            tgt_ids, tgt_bbox = torch.cat(labels), torch.cat(boxes)
            C = (5 * torch.cdist(out_bbox, tgt_bbox, p=1) - prob[:, tgt_ids]
                 - 2 * generalized_box_iou(cxcywh_to_xyxy(out_bbox), cxcywh_to_xyxy(tgt_bbox)))
            C = C.view(BATCH, QUERIES, -1).cpu()
            indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split([len(b) for b in boxes], -1))]
        batch_idx = torch.cat([torch.full((len(s),), i, dtype=torch.int64) for i, (s, _) in enumerate(indices)])
        src_idx = torch.cat([torch.from_numpy(s) for s, _ in indices])
        target_classes = torch.full((BATCH, QUERIES), CLASSES, dtype=torch.int64)
        target_classes[batch_idx, src_idx] = torch.cat([l[torch.from_numpy(j)] for l, (_, j) in zip(labels, indices)])
        loss_ce = F.cross_entropy(logits.transpose(1, 2), target_classes, self.empty_weight)
        src_boxes = pred_boxes[batch_idx, src_idx]
        target_boxes = torch.cat([b[torch.from_numpy(j)] for b, (_, j) in zip(boxes, indices)])
        num_boxes = float(len(target_boxes))
        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction="sum") / num_boxes
        loss_giou = (1 - torch.diag(generalized_box_iou(cxcywh_to_xyxy(src_boxes),
                                                        cxcywh_to_xyxy(target_boxes)))).sum() / num_boxes
        loss = loss_ce + 5 * loss_bbox + 2 * loss_giou
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 0.1)
        self.optimizer.step()
        return loss.item()
