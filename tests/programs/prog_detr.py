from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# DETR as its end-to-end demo writes the model (a conv backbone, a 1x1 projection, learned
# row/column positional embeddings repeated over the grid, nn.Transformer between the
# flattened features and learned queries, class and box heads) and as its repository writes
# the set criterion: a Hungarian matcher (class probability, L1 and generalized-IoU costs,
# C.view(bs, nq, -1).cpu() split by target counts, the assignment solved in Python/numpy),
# cross-entropy with a down-weighted no-object class, L1 and GIoU losses on the matched pairs
# gathered by (batch_idx, src_idx), AdamW with a lower backbone lr, clip_grad_norm_, StepLR
def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)
def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
def box_iou(boxes1, boxes2):
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union, union
def generalized_box_iou(boxes1, boxes2):
    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
    assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
    iou, union = box_iou(boxes1, boxes2)
    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area
def linear_sum_assignment(cost):
    """Hungarian algorithm (shortest augmenting paths with potentials) for a rectangular
    cost matrix with at least as many rows as columns; returns (rows, cols) sorted by row."""
    c = np.asarray(cost, dtype=np.float64).T     # columns (targets) are the ones to place
    n, m = c.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    p, way = np.zeros(m + 1, dtype=np.int64), np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = np.full(m + 1, np.inf), np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0, delta, j1 = p[j0], np.inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = c[i0 - 1, j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[p[j]] += delta; v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if p[j0] == 0:
                break
        while j0:
            j1 = way[j0]; p[j0] = p[j1]; j0 = j1
    pairs = sorted((j - 1, p[j] - 1) for j in range(1, m + 1) if p[j])   # (query, target)
    return np.array([q for q, _ in pairs], dtype=np.int64), np.array([t for _, t in pairs], dtype=np.int64)
class HungarianMatcher(nn.Module):
    def __init__(self, cost_class=1, cost_bbox=5, cost_giou=2):
        super().__init__()
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou
    @torch.no_grad()
    def forward(self, outputs, targets):
        bs, num_queries = outputs["pred_logits"].shape[:2]
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        out_bbox = outputs["pred_boxes"].flatten(0, 1)
        tgt_ids = torch.cat([v["labels"] for v in targets])
        tgt_bbox = torch.cat([v["boxes"] for v in targets])
        cost_class = -out_prob[:, tgt_ids]
        cost_bbox = torch.cdist(out_bbox, tgt_bbox, p=1)
        cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(out_bbox), box_cxcywh_to_xyxy(tgt_bbox))
        C = self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou
        C = C.view(bs, num_queries, -1).cpu()
        sizes = [len(v["boxes"]) for v in targets]
        indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
        return [(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]
class SetCriterion(nn.Module):
    def __init__(self, num_classes, matcher, weight_dict, eos_coef):
        super().__init__()
        self.num_classes, self.matcher, self.weight_dict, self.eos_coef = num_classes, matcher, weight_dict, eos_coef
        empty_weight = torch.ones(self.num_classes + 1)
        empty_weight[-1] = self.eos_coef
        self.register_buffer('empty_weight', empty_weight)
    def loss_labels(self, outputs, targets, indices, num_boxes):
        src_logits = outputs['pred_logits']
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64)
        target_classes[idx] = target_classes_o
        loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
        return {'loss_ce': loss_ce}
    def loss_boxes(self, outputs, targets, indices, num_boxes):
        idx = self._get_src_permutation_idx(indices)
        src_boxes = outputs['pred_boxes'][idx]
        target_boxes = torch.cat([t['boxes'][i] for t, (_, i) in zip(targets, indices)], dim=0)
        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction='none')
        loss_giou = 1 - torch.diag(generalized_box_iou(box_cxcywh_to_xyxy(src_boxes),
                                                       box_cxcywh_to_xyxy(target_boxes)))
        return {'loss_bbox': loss_bbox.sum() / num_boxes, 'loss_giou': loss_giou.sum() / num_boxes}
    def _get_src_permutation_idx(self, indices):
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for (src, _) in indices])
        return batch_idx, src_idx
    def forward(self, outputs, targets):
        indices = self.matcher(outputs, targets)
        num_boxes = max(float(sum(len(t["labels"]) for t in targets)), 1.0)
        losses = {}
        losses.update(self.loss_labels(outputs, targets, indices, num_boxes))
        losses.update(self.loss_boxes(outputs, targets, indices, num_boxes))
        return losses
class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x
class DETRdemo(nn.Module):
    def __init__(self, num_classes, hidden_dim=32, nheads=4, num_encoder_layers=2, num_decoder_layers=2, num_queries=6):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                                      nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.conv = nn.Conv2d(32, hidden_dim, 1)
        self.transformer = nn.Transformer(hidden_dim, nheads, num_encoder_layers, num_decoder_layers,
                                          dim_feedforward=64, dropout=0.0)
        self.linear_class = nn.Linear(hidden_dim, num_classes + 1)
        self.linear_bbox = MLP(hidden_dim, hidden_dim, 4, 3)
        self.query_pos = nn.Parameter(torch.rand(num_queries, hidden_dim))
        self.row_embed = nn.Parameter(torch.rand(50, hidden_dim // 2))
        self.col_embed = nn.Parameter(torch.rand(50, hidden_dim // 2))
    def forward(self, inputs):
        x = self.backbone(inputs)
        h = self.conv(x)
        H, W = h.shape[-2:]
        pos = torch.cat([
            self.col_embed[:W].unsqueeze(0).repeat(H, 1, 1),
            self.row_embed[:H].unsqueeze(1).repeat(1, W, 1),
        ], dim=-1).flatten(0, 1).unsqueeze(1)
        h = self.transformer(pos + 0.1 * h.flatten(2).permute(2, 0, 1),
                             self.query_pos.unsqueeze(1).repeat(1, inputs.shape[0], 1)).transpose(0, 1)
        return {'pred_logits': self.linear_class(h), 'pred_boxes': self.linear_bbox(h).sigmoid()}
def make_batch(rng, bs=4, num_classes=3):
    """Images with 1-3 coloured rectangles; the targets as normalized cxcywh boxes."""
    imgs = rng.standard_normal((bs, 3, 32, 32)).astype(np.float32) * 0.1
    targets = []
    for b in range(bs):
        n = rng.integers(1, 4)
        labels, boxes = rng.integers(0, num_classes, n), []
        for k in range(n):
            x0, y0 = rng.integers(0, 20, 2); w, h = rng.integers(6, 12, 2)
            imgs[b, labels[k], y0:y0 + h, x0:x0 + w] += 1.0
            boxes.append([(x0 + w / 2) / 32, (y0 + h / 2) / 32, w / 32, h / 32])
        targets.append({"labels": torch.from_numpy(labels), "boxes": torch.tensor(boxes, dtype=torch.float32)})
    return torch.from_numpy(imgs), targets
model = DETRdemo(num_classes=3); sync(model)
net = comp(model, fullgraph=True)
weight_dict = {'loss_ce': 1, 'loss_bbox': 5, 'loss_giou': 2}
criterion = SetCriterion(3, HungarianMatcher(), weight_dict, eos_coef=0.1)
param_dicts = [{"params": [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]},
               {"params": [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad], "lr": 1e-4}]
optimizer = torch.optim.AdamW(param_dicts, lr=1e-3, weight_decay=1e-4)
lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 3)
rng = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    samples, targets = make_batch(rng)
    outputs = net(samples)
    loss_dict = criterion(outputs, targets)
    losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
    optimizer.zero_grad()
    losses.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step(); lr_scheduler.step()
    LOSSES += [losses.item(), loss_dict['loss_giou'].item()]
model.eval()
with torch.no_grad():
    samples, targets = make_batch(rng, bs=2)
    out = net(samples)
    probas = out['pred_logits'].softmax(-1)[0, :, :-1]
    keep = probas.max(-1).values > 0.2
    matched = criterion.matcher(out, targets)
LOSSES += [float(keep.sum()), float(matched[1][0].sum()), out['pred_boxes'].sum().item()]
