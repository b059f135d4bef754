from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# FCOS (tianzhi0549/FCOS, torchvision.models.detection.fcos), scaled down: a two-level
# FPN over a small conv backbone, shared GroupNorm towers, learnable per-level Scale on
# exp'd ltrb regressions, a centerness branch; targets by points inside boxes within each
# level's size range (the smallest-area box wins by min over an inf-filled area matrix),
# sigmoid focal loss written out as torchvision.ops.sigmoid_focal_loss, GIoU loss weighted
# by the centerness targets, BCE on centerness; SGD with warmup by LambdaLR; inference by
# sqrt(cls * centerness) and a per-image topk of candidates over a threshold


def sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2, reduction: str = "none"):
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "none":
        pass
    elif reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


def generalized_box_iou_loss(boxes1, boxes2, reduction="none", eps=1e-7):
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1 = torch.max(x1, x1g)
    ykis1 = torch.max(y1, y1g)
    xkis2 = torch.min(x2, x2g)
    ykis2 = torch.min(y2, y2g)
    intsctk = torch.zeros_like(x1)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsctk[mask] = (xkis2[mask] - xkis1[mask]) * (ykis2[mask] - ykis1[mask])
    unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk
    iouk = intsctk / (unionk + eps)
    xc1 = torch.min(x1, x1g)
    yc1 = torch.min(y1, y1g)
    xc2 = torch.max(x2, x2g)
    yc2 = torch.max(y2, y2g)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    miouk = iouk - ((area_c - unionk) / (area_c + eps))
    loss = 1 - miouk
    return loss.sum() if reduction == "sum" else loss


class Scale(nn.Module):
    def __init__(self, init_value=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.FloatTensor([init_value]))

    def forward(self, input):
        return input * self.scale


class FCOSHead(nn.Module):
    def __init__(self, in_channels, num_classes, num_convs=2, prior_prob=0.01):
        super().__init__()
        cls_tower, bbox_tower = [], []
        for _ in range(num_convs):
            for tower in (cls_tower, bbox_tower):
                tower.append(nn.Conv2d(in_channels, in_channels, 3, 1, 1))
                tower.append(nn.GroupNorm(8, in_channels))
                tower.append(nn.ReLU())
        self.add_module('cls_tower', nn.Sequential(*cls_tower))
        self.add_module('bbox_tower', nn.Sequential(*bbox_tower))
        self.cls_logits = nn.Conv2d(in_channels, num_classes, 3, 1, 1)
        self.bbox_pred = nn.Conv2d(in_channels, 4, 3, 1, 1)
        self.centerness = nn.Conv2d(in_channels, 1, 3, 1, 1)
        for modules in [self.cls_tower, self.bbox_tower, self.cls_logits, self.bbox_pred, self.centerness]:
            for l in modules.modules():
                if isinstance(l, nn.Conv2d):
                    torch.nn.init.normal_(l.weight, std=0.01)
                    torch.nn.init.constant_(l.bias, 0)
        bias_value = -math.log((1 - prior_prob) / prior_prob)
        torch.nn.init.constant_(self.cls_logits.bias, bias_value)
        self.scales = nn.ModuleList([Scale(init_value=1.0) for _ in range(2)])

    def forward(self, x):
        logits, bbox_reg, centerness = [], [], []
        for l, feature in enumerate(x):
            cls_tower = self.cls_tower(feature)
            box_tower = self.bbox_tower(feature)
            logits.append(self.cls_logits(cls_tower))
            centerness.append(self.centerness(box_tower))
            bbox_reg.append(torch.exp(self.scales[l](self.bbox_pred(box_tower))))
        return logits, bbox_reg, centerness


class FCOS(nn.Module):
    def __init__(self, num_classes, ch=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, ch, 3, 2, 1), nn.BatchNorm2d(ch), nn.ReLU(inplace=True),
                                  nn.Conv2d(ch, ch, 3, 2, 1), nn.BatchNorm2d(ch), nn.ReLU(inplace=True))
        self.c3 = nn.Sequential(nn.Conv2d(ch, 2 * ch, 3, 2, 1), nn.BatchNorm2d(2 * ch), nn.ReLU(inplace=True))
        self.c4 = nn.Sequential(nn.Conv2d(2 * ch, 4 * ch, 3, 2, 1), nn.BatchNorm2d(4 * ch), nn.ReLU(inplace=True))
        self.inner3, self.inner4 = nn.Conv2d(2 * ch, ch, 1), nn.Conv2d(4 * ch, ch, 1)
        self.layer3, self.layer4 = nn.Conv2d(ch, ch, 3, 1, 1), nn.Conv2d(ch, ch, 3, 1, 1)
        self.head = FCOSHead(ch, num_classes)

    def forward(self, images):
        c3 = self.c3(self.stem(images))
        c4 = self.c4(c3)
        last_inner = self.inner4(c4)
        p4 = self.layer4(last_inner)
        inner_top_down = F.interpolate(last_inner, size=c3.shape[-2:], mode="nearest")
        last_inner = self.inner3(c3) + inner_top_down
        p3 = self.layer3(last_inner)
        return self.head([p3, p4])


def compute_locations_per_level(h, w, stride):
    shifts_x = torch.arange(0, w * stride, step=stride, dtype=torch.float32)
    shifts_y = torch.arange(0, h * stride, step=stride, dtype=torch.float32)
    shift_y, shift_x = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
    shift_x = shift_x.reshape(-1)
    shift_y = shift_y.reshape(-1)
    return torch.stack((shift_x, shift_y), dim=1) + stride // 2


INF = 100000000


def prepare_targets(points, targets):
    object_sizes_of_interest = [[-1, 16], [16, INF]]
    expanded = []
    for l, points_per_level in enumerate(points):
        sizes = points_per_level.new_tensor(object_sizes_of_interest[l])
        expanded.append(sizes[None].expand(len(points_per_level), -1))
    expanded = torch.cat(expanded, dim=0)
    num_points_per_level = [len(p) for p in points]
    points_all_level = torch.cat(points, dim=0)
    labels, reg_targets = [], []
    xs, ys = points_all_level[:, 0], points_all_level[:, 1]
    for bboxes, labels_per_im in targets:
        area = (bboxes[:, 2] - bboxes[:, 0]) * (bboxes[:, 3] - bboxes[:, 1])
        l = xs[:, None] - bboxes[:, 0][None]
        t = ys[:, None] - bboxes[:, 1][None]
        r = bboxes[:, 2][None] - xs[:, None]
        b = bboxes[:, 3][None] - ys[:, None]
        reg_targets_per_im = torch.stack([l, t, r, b], dim=2)
        is_in_boxes = reg_targets_per_im.min(dim=2)[0] > 0
        max_reg_targets_per_im = reg_targets_per_im.max(dim=2)[0]
        is_cared_in_the_level = (max_reg_targets_per_im >= expanded[:, [0]]) & \
                                (max_reg_targets_per_im <= expanded[:, [1]])
        locations_to_gt_area = area[None].repeat(len(points_all_level), 1)
        locations_to_gt_area[is_in_boxes == 0] = INF
        locations_to_gt_area[is_cared_in_the_level == 0] = INF
        locations_to_min_area, locations_to_gt_inds = locations_to_gt_area.min(dim=1)
        reg_targets_per_im = reg_targets_per_im[range(len(points_all_level)), locations_to_gt_inds]
        labels_per_im = labels_per_im[locations_to_gt_inds]
        labels_per_im[locations_to_min_area == INF] = 0
        labels.append(labels_per_im)
        reg_targets.append(reg_targets_per_im)
    return torch.stack(labels), torch.stack(reg_targets), num_points_per_level


def compute_centerness_targets(reg_targets):
    left_right = reg_targets[:, [0, 2]]
    top_bottom = reg_targets[:, [1, 3]]
    centerness = (left_right.min(dim=-1)[0] / left_right.max(dim=-1)[0]) * \
                 (top_bottom.min(dim=-1)[0] / top_bottom.max(dim=-1)[0])
    return torch.sqrt(centerness)


def flatten(outs, c):
    return torch.cat([o.permute(0, 2, 3, 1).reshape(o.size(0), -1, c) for o in outs], dim=1)


def fcos_loss(focal, giou, points, box_cls, box_regression, centerness, targets, num_classes):
    labels, reg_targets, _ = prepare_targets(points, targets)
    box_cls_flatten = flatten(box_cls, num_classes).reshape(-1, num_classes)
    box_regression_flatten = flatten(box_regression, 4).reshape(-1, 4)
    centerness_flatten = flatten(centerness, 1).reshape(-1)
    labels_flatten = labels.reshape(-1)
    reg_targets_flatten = reg_targets.reshape(-1, 4)
    pos_inds = torch.nonzero(labels_flatten > 0).squeeze(1)
    num_pos = max(pos_inds.numel(), 1.0)
    gt_classes_targets = torch.zeros_like(box_cls_flatten)
    gt_classes_targets[pos_inds, labels_flatten[pos_inds] - 1] = 1.0
    cls_loss = focal(box_cls_flatten, gt_classes_targets, reduction="sum") / num_pos
    box_regression_flatten = box_regression_flatten[pos_inds]
    reg_targets_flatten = reg_targets_flatten[pos_inds]
    centerness_flatten = centerness_flatten[pos_inds]
    if pos_inds.numel() > 0:
        centerness_targets = compute_centerness_targets(reg_targets_flatten)
        pts = torch.cat(points, 0).repeat(labels.size(0), 1)[pos_inds]
        pred_boxes = torch.cat([pts - box_regression_flatten[:, :2] * 8, pts + box_regression_flatten[:, 2:] * 8], 1)
        gt_boxes = torch.cat([pts - reg_targets_flatten[:, :2], pts + reg_targets_flatten[:, 2:]], 1)
        reg_loss = (giou(pred_boxes, gt_boxes) * centerness_targets).sum() \
            / centerness_targets.sum()
        centerness_loss = F.binary_cross_entropy_with_logits(centerness_flatten, centerness_targets,
                                                             reduction="sum") / num_pos
    else:
        reg_loss = box_regression_flatten.sum()
        centerness_loss = centerness_flatten.sum()
    return cls_loss, reg_loss, centerness_loss


def postprocess(box_cls, centerness, score_thresh=0.05, topk=20):
    N = box_cls[0].size(0)
    scores = torch.sqrt(flatten(box_cls, box_cls[0].size(1)).sigmoid() * flatten(centerness, 1).sigmoid())
    out = []
    for i in range(N):
        s = scores[i].flatten()
        keep = s > score_thresh
        s = s[keep]
        top, idx = s.topk(min(topk, s.numel()))
        out.append(top.sum())
    return torch.stack(out)


num_classes, img = 3, 64
rng = np.random.default_rng(0)


def make_batch(bs=2):
    images = torch.from_numpy(rng.standard_normal((bs, 3, img, img)).astype(np.float32))
    targets = []
    for _ in range(bs):
        n = int(rng.integers(1, 4))
        xy = rng.uniform(0, img * 0.6, (n, 2))
        wh = rng.uniform(8, img * 0.4, (n, 2))
        boxes = torch.from_numpy(np.concatenate([xy, xy + wh], 1).astype(np.float32))
        targets.append((boxes, torch.from_numpy(rng.integers(1, num_classes + 1, n))))
    return images, targets


net = FCOS(num_classes); sync(net)
model = comp(net)
focal = comp(sigmoid_focal_loss, fullgraph=True)
giou = comp(generalized_box_iou_loss, dynamic=True)
points = [compute_locations_per_level(8, 8, 8), compute_locations_per_level(4, 4, 16)]
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
warmup = 2
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / warmup) * 0.5 + 0.5)
LOSSES = []
for it in range(4):
    images, targets = make_batch()
    box_cls, box_regression, centerness = model(images)
    cls_loss, reg_loss, ctr_loss = fcos_loss(focal, giou, points, box_cls, box_regression, centerness, targets, num_classes)
    losses = cls_loss + reg_loss + ctr_loss
    optimizer.zero_grad()
    losses.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 3.0)
    optimizer.step()
    scheduler.step()
    LOSSES += [cls_loss.item(), reg_loss.item(), ctr_loss.item()]
net.eval()
with torch.no_grad():
    images, _ = make_batch(3)
    box_cls, _, centerness = model(images)
    LOSSES += postprocess(box_cls, centerness).tolist()
