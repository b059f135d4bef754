from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Mask R-CNN's RoI heads as torchvision writes them, with RoIAlign written out by hand on
# grid_sample (aligned=True: sampling_ratio points per bin at half-pixel offsets, the bins'
# samples averaged by avg_pool2d): proposals matched to ground truth by box IoU, a balanced
# positive/negative sampler, TwoMLPHead + FastRCNNPredictor under fastrcnn_loss
# (cross-entropy, class-specific box deltas by BoxCoder(10, 10, 5, 5) under smooth L1 on the
# positives), the mask head (four 3x3 convs, ConvTranspose2d, per-class logits) on the
# positive RoIs only, its targets the ground-truth masks RoIAligned onto the proposals,
# maskrcnn_loss's BCE on the logits of each RoI's label; the positives' count changes per
# batch (dynamic=True), SGD with momentum under a linear warmup LambdaLR
def roi_align(input, rois, output_size, spatial_scale=1.0, sampling_ratio=2, aligned=True):
    """rois: [K, 5] (batch index, x1, y1, x2, y2) in image coordinates."""
    oh, ow = output_size
    H, W = input.shape[-2:]
    offset = 0.5 if aligned else 0.0
    x1 = rois[:, 1] * spatial_scale - offset
    y1 = rois[:, 2] * spatial_scale - offset
    x2 = rois[:, 3] * spatial_scale - offset
    y2 = rois[:, 4] * spatial_scale - offset
    bin_w = (x2 - x1) / ow
    bin_h = (y2 - y1) / oh
    steps_x = (torch.arange(ow * sampling_ratio, dtype=input.dtype) + 0.5) / sampling_ratio
    steps_y = (torch.arange(oh * sampling_ratio, dtype=input.dtype) + 0.5) / sampling_ratio
    xs = x1[:, None] + steps_x[None] * bin_w[:, None]          # [K, ow * s] pixel coordinates
    ys = y1[:, None] + steps_y[None] * bin_h[:, None]
    gx = (2 * xs + 1) / W - 1                                   # align_corners=False normalization
    gy = (2 * ys + 1) / H - 1
    grid = torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)
    feats = input[rois[:, 0].long()]
    sampled = F.grid_sample(feats, grid, mode="bilinear", padding_mode="border", align_corners=False)
    return F.avg_pool2d(sampled, sampling_ratio)
def box_iou(boxes1, boxes2):
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return inter / (area1[:, None] + area2 - inter)
def encode_boxes(reference_boxes, proposals, weights=(10.0, 10.0, 5.0, 5.0)):
    wx, wy, ww, wh = weights
    ex_widths = proposals[:, 2] - proposals[:, 0]
    ex_heights = proposals[:, 3] - proposals[:, 1]
    ex_ctr_x = proposals[:, 0] + 0.5 * ex_widths
    ex_ctr_y = proposals[:, 1] + 0.5 * ex_heights
    gt_widths = reference_boxes[:, 2] - reference_boxes[:, 0]
    gt_heights = reference_boxes[:, 3] - reference_boxes[:, 1]
    gt_ctr_x = reference_boxes[:, 0] + 0.5 * gt_widths
    gt_ctr_y = reference_boxes[:, 1] + 0.5 * gt_heights
    targets_dx = wx * (gt_ctr_x - ex_ctr_x) / ex_widths
    targets_dy = wy * (gt_ctr_y - ex_ctr_y) / ex_heights
    targets_dw = ww * torch.log(gt_widths / ex_widths)
    targets_dh = wh * torch.log(gt_heights / ex_heights)
    return torch.stack((targets_dx, targets_dy, targets_dw, targets_dh), dim=1)
class TwoMLPHead(nn.Module):
    def __init__(self, in_channels, representation_size):
        super().__init__()
        self.fc6 = nn.Linear(in_channels, representation_size)
        self.fc7 = nn.Linear(representation_size, representation_size)
    def forward(self, x):
        x = x.flatten(start_dim=1)
        return F.relu(self.fc7(F.relu(self.fc6(x))))
class FastRCNNPredictor(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_classes * 4)
    def forward(self, x):
        return self.cls_score(x), self.bbox_pred(x)
class MaskRCNNHeads(nn.Sequential):
    def __init__(self, in_channels, layers):
        blocks = []
        for l in layers:
            blocks += [nn.Conv2d(in_channels, l, 3, padding=1), nn.ReLU(inplace=True)]
            in_channels = l
        super().__init__(*blocks)
        for layer in self.modules():
            if isinstance(layer, nn.Conv2d):
                nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(layer.bias)
class MaskRCNNPredictor(nn.Sequential):
    def __init__(self, in_channels, dim_reduced, num_classes):
        super().__init__()
        self.add_module("conv5_mask", nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0))
        self.add_module("relu", nn.ReLU(inplace=True))
        self.add_module("mask_fcn_logits", nn.Conv2d(dim_reduced, num_classes, 1, 1, 0))
class RoIHeadsNet(nn.Module):
    def __init__(self, num_classes=3, ch=16):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, ch, 3, 2, 1), nn.ReLU(inplace=True),
                                      nn.Conv2d(ch, ch, 3, 2, 1), nn.ReLU(inplace=True))
        self.box_head = TwoMLPHead(ch * 7 * 7, 64)
        self.box_predictor = FastRCNNPredictor(64, num_classes)
        self.mask_head = MaskRCNNHeads(ch, (16, 16, 16, 16))
        self.mask_predictor = MaskRCNNPredictor(16, 16, num_classes)
    def forward(self, images, rois, pos_rois):
        features = self.backbone(images)
        box_features = self.box_head(roi_align(features, rois, (7, 7), spatial_scale=0.25))
        class_logits, box_regression = self.box_predictor(box_features)
        mask_features = self.mask_head(roi_align(features, pos_rois, (7, 7), spatial_scale=0.25))
        return class_logits, box_regression, self.mask_predictor(mask_features)
def fastrcnn_loss(class_logits, box_regression, labels, regression_targets):
    labels = torch.cat(labels, dim=0)
    regression_targets = torch.cat(regression_targets, dim=0)
    classification_loss = F.cross_entropy(class_logits, labels)
    pos_inds = torch.where(labels > 0)[0]
    labels_pos = labels[pos_inds]
    N, num_classes = class_logits.shape
    box_regression = box_regression.reshape(N, box_regression.size(-1) // 4, 4)
    box_loss = F.smooth_l1_loss(box_regression[pos_inds, labels_pos], regression_targets[pos_inds],
                                beta=1 / 9, reduction="sum")
    return classification_loss, box_loss / labels.numel()
def project_masks_on_boxes(gt_masks, boxes, matched_idxs, M):
    rois = torch.cat([matched_idxs[:, None].to(boxes.dtype), boxes], dim=1)
    return roi_align(gt_masks[:, None], rois, (M, M), 1.0)[:, 0]
def maskrcnn_loss(mask_logits, pos_boxes, gt_masks, labels, mask_matched_idxs):
    mask_targets = project_masks_on_boxes(gt_masks, pos_boxes, mask_matched_idxs, mask_logits.shape[-1])
    return F.binary_cross_entropy_with_logits(mask_logits[torch.arange(labels.shape[0]), labels], mask_targets)
def make_batch(rng, bs=2, num_classes=3, per_image=16):
    imgs = rng.standard_normal((bs, 3, 64, 64)).astype(np.float32) * 0.1
    gt_boxes, gt_labels, gt_masks, proposals = [], [], [], []
    for b in range(bs):
        n = rng.integers(1, 4)
        boxes = []
        for k in range(n):
            x0, y0 = rng.integers(0, 40, 2); w, h = rng.integers(12, 24, 2)
            m = np.zeros((64, 64), np.float32)
            yy, xx = np.mgrid[:h, :w]
            m[y0:y0 + h, x0:x0 + w] = ((yy - h / 2) ** 2 / (h / 2) ** 2 + (xx - w / 2) ** 2 / (w / 2) ** 2 < 1)
            lab = rng.integers(1, num_classes)
            imgs[b, lab] += m
            boxes.append([x0, y0, x0 + w, y0 + h]); gt_masks.append(m); gt_labels.append(lab)
        boxes = np.array(boxes, np.float32)
        jit = boxes[rng.integers(0, n, per_image // 2)] + rng.normal(0, 3, (per_image // 2, 4))
        x0y0 = rng.uniform(0, 48, (per_image // 2, 2)); wh = rng.uniform(8, 24, (per_image // 2, 2))
        props = np.concatenate([jit, np.concatenate([x0y0, np.minimum(x0y0 + wh, 63)], 1)])
        props[:, 2:] = np.maximum(props[:, 2:], props[:, :2] + 2)
        gt_boxes.append(torch.from_numpy(boxes)); proposals.append(torch.from_numpy(props.astype(np.float32)))
    labels = torch.tensor(gt_labels); masks = torch.from_numpy(np.stack(gt_masks))
    return torch.from_numpy(imgs), gt_boxes, labels, masks, proposals
def select_training_samples(proposals, gt_boxes, gt_labels_all):
    labels, matched, regression_targets, offset = [], [], [], 0
    for props, gts in zip(proposals, gt_boxes):
        iou = box_iou(gts, props)
        matched_vals, matches = iou.max(dim=0)
        lab = gt_labels_all[offset + matches].clone()
        lab[matched_vals < 0.5] = 0
        labels.append(lab); matched.append(matches + offset)
        regression_targets.append(encode_boxes(gts[matches], props))
        offset += len(gts)
    return labels, matched, regression_targets
model = RoIHeadsNet(); sync(model)
net = comp(model, dynamic=True, fullgraph=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 4))
rng = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    images, gt_boxes, gt_labels, gt_masks, proposals = make_batch(rng)
    with torch.no_grad():
        labels, matched, regression_targets = select_training_samples(proposals, gt_boxes, gt_labels)
    rois = torch.cat([torch.cat([torch.full((len(p), 1), float(i)), p], 1) for i, p in enumerate(proposals)])
    all_labels, all_matched = torch.cat(labels), torch.cat(matched)
    pos = torch.where(all_labels > 0)[0]
    class_logits, box_regression, mask_logits = net(images, rois, rois[pos])
    loss_classifier, loss_box_reg = fastrcnn_loss(class_logits, box_regression, labels, regression_targets)
    loss_mask = maskrcnn_loss(mask_logits, rois[pos, 1:], gt_masks, all_labels[pos], all_matched[pos])
    losses = loss_classifier + loss_box_reg + loss_mask
    optimizer.zero_grad()
    losses.backward()
    optimizer.step(); warmup.step()
    LOSSES += [losses.item(), loss_mask.item(), float(len(pos))]
model.eval()
with torch.no_grad():
    images, gt_boxes, gt_labels, gt_masks, proposals = make_batch(rng, bs=1)
    rois = torch.cat([torch.zeros(len(proposals[0]), 1), proposals[0]], 1)
    class_logits, _, mask_logits = net(images, rois, rois)
    scores, cls = F.softmax(class_logits, -1).max(-1)
    masks = mask_logits[torch.arange(len(cls)), cls].sigmoid() > 0.5
LOSSES += [scores.sum().item(), float(masks.sum())]
