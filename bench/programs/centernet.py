"""CenterNet ("objects as points", xingyizhou/CenterNet's ctdet task) training, as its
repository writes the losses.

A stride-8 conv backbone with BatchNorm and a ConvTranspose2d up path to a stride-4 map
(96x96 images, batch 8, 3 classes), heatmap/size/offset heads (the heatmap bias at -2.19),
the heatmap clamped after an in-place ``sigmoid_``, the penalty-reduced focal loss and
RegL1 losses on features gathered at the objects' flat centre indices, Adam. Gaussian
targets are drawn once in numpy. Compiled: the model (the losses stay eager, as they
branch on the positives' count).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "centernet"
BATCH, SIZE, CLASSES, MAX_OBJS = 8, 96, 3, 16


def _neg_loss(pred, gt):
    pos_inds = gt.eq(1).float()
    neg_inds = gt.lt(1).float()
    neg_weights = torch.pow(1 - gt, 4)
    pos_loss = (torch.log(pred) * torch.pow(1 - pred, 2) * pos_inds).sum()
    neg_loss = (torch.log(1 - pred) * torch.pow(pred, 2) * neg_weights * neg_inds).sum()
    num_pos = pos_inds.float().sum()
    if num_pos == 0:
        return -neg_loss
    return -(pos_loss + neg_loss) / num_pos


def _transpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), feat.size(2))
    return feat.gather(1, ind)


def reg_l1(output, mask, ind, target):
    pred = _transpose_and_gather_feat(output, ind)
    mask = mask.unsqueeze(2).expand_as(pred).float()
    return F.l1_loss(pred * mask, target * mask, reduction='sum') / (mask.sum() + 1e-4)


def conv_bn(cin, cout, stride):
    return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class CtdetNet(nn.Module):
    def __init__(self, heads, head_conv=32):
        super().__init__()
        self.base = nn.Sequential(*conv_bn(3, 16, 2), *conv_bn(16, 32, 2), *conv_bn(32, 32, 1),
                                  *conv_bn(32, 64, 2), *conv_bn(64, 64, 1))
        self.deconv = nn.Sequential(nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.ReLU(inplace=True))
        self.heads = heads
        for head, classes in heads.items():
            fc = nn.Sequential(nn.Conv2d(32, head_conv, 3, padding=1), nn.ReLU(inplace=True),
                               nn.Conv2d(head_conv, classes, 1))
            self.__setattr__(head, fc)

    def forward(self, x):
        x = self.deconv(self.base(x))
        return [{head: self.__getattr__(head)(x) for head in self.heads}]


def targets(r, out):
    hm = np.zeros((BATCH, CLASSES, out, out), np.float32)
    wh = np.zeros((BATCH, MAX_OBJS, 2), np.float32)
    reg = np.zeros((BATCH, MAX_OBJS, 2), np.float32)
    ind = np.zeros((BATCH, MAX_OBJS), np.int64)
    mask = np.zeros((BATCH, MAX_OBJS), np.uint8)
    ys, xs = np.ogrid[:out, :out]
    for b in range(BATCH):
        for k in range(int(r.integers(2, MAX_OBJS + 1))):
            h, w = r.uniform(2, 10, 2)
            ct = r.uniform(1, out - 1, 2).astype(np.float32)
            ci = ct.astype(np.int64)
            sigma = (2 * max(1, int(math.sqrt(h * w) / 3)) + 1) / 6
            g = np.exp(-((xs - ci[0]) ** 2 + (ys - ci[1]) ** 2) / (2 * sigma ** 2))
            c = int(r.integers(CLASSES))
            np.maximum(hm[b, c], g, out=hm[b, c])
            wh[b, k], reg[b, k], ind[b, k], mask[b, k] = (w, h), ct - ci, ci[1] * out + ci[0], 1
    return [torch.from_numpy(a) for a in (hm, wh, reg, ind, mask)]


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.input = torch.from_numpy(r.standard_normal((BATCH, 3, SIZE, SIZE)).astype(np.float32))
        self.hm, self.wh, self.reg, self.ind, self.mask = targets(r, SIZE // 4)
        self.model = CtdetNet({'hm': CLASSES, 'wh': 2, 'reg': 2})
        load_params(NAME, self.model)
        with torch.no_grad():
            self.model.hm[-1].bias.fill_(-2.19)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.25e-4)
        self.forward = compile(self.model)

    def step(self) -> float:
        output = self.forward(self.input)[0]
        hm = torch.clamp(output['hm'].sigmoid_(), min=1e-4, max=1 - 1e-4)
        loss = (_neg_loss(hm, self.hm) + 0.1 * reg_l1(output['wh'], self.mask, self.ind, self.wh)
                + reg_l1(output['reg'], self.mask, self.ind, self.reg))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
