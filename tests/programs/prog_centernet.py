from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# CenterNet "objects as points" (xingyizhou/CenterNet's ctdet task), scaled down: a stride-4
# conv backbone with a ConvTranspose2d up path, heatmap/wh/reg heads (the heatmap bias at
# -2.19), Gaussian targets drawn in numpy, the penalty-reduced focal loss on a heatmap
# clamped after an in-place sigmoid_, RegL1 losses on features gathered at the centres'
# flat indices, Adam under MultiStepLR; decoding by 3x3 max_pool2d NMS and two topk's


def _sigmoid(x):
    y = torch.clamp(x.sigmoid_(), min=1e-4, max=1 - 1e-4)
    return y


def _gather_feat(feat, ind, mask=None):
    dim = feat.size(2)
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    feat = feat.gather(1, ind)
    if mask is not None:
        mask = mask.unsqueeze(2).expand_as(feat)
        feat = feat[mask]
        feat = feat.view(-1, dim)
    return feat


def _transpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    feat = _gather_feat(feat, ind)
    return feat


def _neg_loss(pred, gt):
    pos_inds = gt.eq(1).float()
    neg_inds = gt.lt(1).float()
    neg_weights = torch.pow(1 - gt, 4)
    loss = 0
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds
    neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg_inds
    num_pos = pos_inds.float().sum()
    pos_loss = pos_loss.sum()
    neg_loss = neg_loss.sum()
    if num_pos == 0:
        loss = loss - neg_loss
    else:
        loss = loss - (pos_loss + neg_loss) / num_pos
    return loss


class RegL1Loss(nn.Module):
    def forward(self, output, mask, ind, target):
        pred = _transpose_and_gather_feat(output, ind)
        mask = mask.unsqueeze(2).expand_as(pred).float()
        loss = F.l1_loss(pred * mask, target * mask, reduction='sum')
        loss = loss / (mask.sum() + 1e-4)
        return loss


class CtdetNet(nn.Module):
    def __init__(self, heads, head_conv=16):
        super().__init__()
        self.base = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
            nn.Conv2d(32, 48, 3, 2, 1, bias=False), nn.BatchNorm2d(48), nn.ReLU(inplace=True))
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(48, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.heads = heads
        for head in self.heads:
            classes = self.heads[head]
            fc = nn.Sequential(nn.Conv2d(32, head_conv, 3, padding=1, bias=True), nn.ReLU(inplace=True),
                               nn.Conv2d(head_conv, classes, 1, 1, 0, bias=True))
            if 'hm' in head:
                fc[-1].bias.data.fill_(-2.19)
            self.__setattr__(head, fc)

    def forward(self, x):
        x = self.deconv(self.base(x))
        ret = {}
        for head in self.heads:
            ret[head] = self.__getattr__(head)(x)
        return [ret]


def _nms(heat, kernel=3):
    pad = (kernel - 1) // 2
    hmax = F.max_pool2d(heat, (kernel, kernel), stride=1, padding=pad)
    keep = (hmax == heat).float()
    return heat * keep


def _topk(scores, K=40):
    batch, cat, height, width = scores.size()
    topk_scores, topk_inds = torch.topk(scores.view(batch, cat, -1), K)
    topk_inds = topk_inds % (height * width)
    topk_ys = (topk_inds / width).int().float()
    topk_xs = (topk_inds % width).int().float()
    topk_score, topk_ind = torch.topk(topk_scores.view(batch, -1), K)
    topk_clses = (topk_ind / K).int()
    topk_inds = _gather_feat(topk_inds.view(batch, -1, 1), topk_ind).view(batch, K)
    topk_ys = _gather_feat(topk_ys.view(batch, -1, 1), topk_ind).view(batch, K)
    topk_xs = _gather_feat(topk_xs.view(batch, -1, 1), topk_ind).view(batch, K)
    return topk_score, topk_inds, topk_clses, topk_ys, topk_xs


def ctdet_decode(heat, wh, reg=None, K=100):
    batch, cat, height, width = heat.size()
    heat = _nms(heat)
    scores, inds, clses, ys, xs = _topk(heat, K=K)
    if reg is not None:
        reg = _transpose_and_gather_feat(reg, inds)
        reg = reg.view(batch, K, 2)
        xs = xs.view(batch, K, 1) + reg[:, :, 0:1]
        ys = ys.view(batch, K, 1) + reg[:, :, 1:2]
    else:
        xs = xs.view(batch, K, 1) + 0.5
        ys = ys.view(batch, K, 1) + 0.5
    wh = _transpose_and_gather_feat(wh, inds)
    wh = wh.view(batch, K, 2)
    clses = clses.view(batch, K, 1).float()
    scores = scores.view(batch, K, 1)
    bboxes = torch.cat([xs - wh[..., 0:1] / 2, ys - wh[..., 1:2] / 2,
                        xs + wh[..., 0:1] / 2, ys + wh[..., 1:2] / 2], dim=2)
    detections = torch.cat([bboxes, scores, clses], dim=2)
    return detections


def gaussian_radius(det_size, min_overlap=0.7):
    height, width = det_size
    a1, b1 = 1, (height + width)
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 + math.sqrt(b1 ** 2 - 4 * a1 * c1)) / 2
    a2, b2 = 4, 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    r2 = (b2 + math.sqrt(b2 ** 2 - 4 * a2 * c2)) / 2
    a3, b3 = 4 * min_overlap, -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    r3 = (b3 + math.sqrt(b3 ** 2 - 4 * a3 * c3)) / 2
    return min(r1, r2, r3)


def draw_umich_gaussian(heatmap, center, radius):
    diameter = 2 * radius + 1
    m = (diameter - 1.) / 2.
    y, x = np.ogrid[-m:m + 1, -m:m + 1]
    gaussian = np.exp(-(x * x + y * y) / (2 * (diameter / 6) ** 2))
    x, y = int(center[0]), int(center[1])
    height, width = heatmap.shape[0:2]
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    masked_heatmap = heatmap[y - top:y + bottom, x - left:x + right]
    masked_gaussian = gaussian[radius - top:radius + bottom, radius - left:radius + right]
    np.maximum(masked_heatmap, masked_gaussian, out=masked_heatmap)


num_classes, out_size, max_objs, batch_size = 3, 16, 8, 4
rng = np.random.default_rng(0)


def make_batch():
    inp = rng.standard_normal((batch_size, 3, out_size * 4, out_size * 4)).astype(np.float32)
    hm = np.zeros((batch_size, num_classes, out_size, out_size), np.float32)
    wh = np.zeros((batch_size, max_objs, 2), np.float32)
    reg = np.zeros((batch_size, max_objs, 2), np.float32)
    ind = np.zeros((batch_size, max_objs), np.int64)
    reg_mask = np.zeros((batch_size, max_objs), np.uint8)
    for b in range(batch_size):
        for k in range(int(rng.integers(1, max_objs + 1))):
            h, w = rng.uniform(2, 8, 2)
            ct = rng.uniform(1, out_size - 1, 2).astype(np.float32)
            ct_int = ct.astype(np.int32)
            radius = max(0, int(gaussian_radius((math.ceil(h), math.ceil(w)))))
            draw_umich_gaussian(hm[b, int(rng.integers(num_classes))], ct_int, radius)
            wh[b, k] = 1. * w, 1. * h
            ind[b, k] = ct_int[1] * out_size + ct_int[0]
            reg[b, k] = ct - ct_int
            reg_mask[b, k] = 1
    return [torch.from_numpy(a) for a in (inp, hm, wh, reg, ind, reg_mask)]


heads = {'hm': num_classes, 'wh': 2, 'reg': 2}
net = CtdetNet(heads); sync(net)
model = comp(net)
decode = comp(ctdet_decode, fullgraph=True)
crit_reg = RegL1Loss()
optimizer = torch.optim.Adam(net.parameters(), 1.25e-3)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1)
LOSSES = []
for epoch in range(3):
    inp, hm, wh, reg, ind, reg_mask = make_batch()
    output = model(inp)[0]
    output['hm'] = _sigmoid(output['hm'])
    hm_loss = _neg_loss(output['hm'], hm)
    wh_loss = crit_reg(output['wh'], reg_mask, ind, wh)
    off_loss = crit_reg(output['reg'], reg_mask, ind, reg)
    loss = hm_loss + 0.1 * wh_loss + off_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), hm_loss.item(), wh_loss.item(), off_loss.item()]
net.eval()
with torch.no_grad():
    inp = make_batch()[0]
    output = model(inp)[-1]
    hm = output['hm'].sigmoid_()
    dets = decode(hm, output['wh'], reg=output['reg'], K=10)
# sums and sorted scores: the same detections whatever order equal scores take
LOSSES += dets[..., 4].flatten().tolist() + [dets[..., :4].sum().item(), dets[..., 5].sum().item()]
