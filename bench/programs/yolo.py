"""A YOLOv5-lite detector's training step, as ultralytics writes the model and the loss.

Focus (space-to-depth by ``x[..., ::2, ::2]`` slices), Conv-BN-SiLU, C3 blocks, SPPF
(one ``max_pool2d`` k5 chained three times, cat), an FPN/PAN neck of ``nn.Upsample`` and
``torch.cat``, a Detect head over strides 8/16/32 reshaped by view/permute; the loss
assigns targets by anchor-ratio masks over each centre cell and two neighbours (boolean
indexing, counts changing every step), CIoU on the boxes and BCEWithLogits (pos_weight)
on objectness and classes. Batch 8 of 128x128 channels_last images; SGD with Nesterov
momentum. Compiled: the model.
"""
import math

import numpy as np
import torch
import torch.nn as nn

from .common import load_params, rng

NAME = "yolo"
BATCH, SIZE, CLASSES, WIDTH = 8, 128, 3, 16
ANCHORS = ([10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326])


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c2, 1, 1), Conv(c2, c2, 3, 1)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = c2 // 2
        self.cv1, self.cv2, self.cv3 = Conv(c1, c_, 1, 1), Conv(c1, c_, 1, 1), Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c1 // 2, 1, 1), Conv(c1 // 2 * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class YOLOLite(nn.Module):
    def __init__(self, nc=CLASSES, w=WIDTH):
        super().__init__()
        self.focus = Conv(12, w, 3)
        self.b1 = nn.Sequential(Conv(w, 2 * w, 3, 2), C3(2 * w, 2 * w, 1))
        self.b2 = nn.Sequential(Conv(2 * w, 4 * w, 3, 2), C3(4 * w, 4 * w, 2))
        self.b3 = nn.Sequential(Conv(4 * w, 8 * w, 3, 2), C3(8 * w, 8 * w, 1))
        self.b4 = nn.Sequential(Conv(8 * w, 8 * w, 3, 2), SPPF(8 * w, 8 * w, 5))
        self.up = nn.Upsample(None, 2, "nearest")
        self.lat5, self.td4 = Conv(8 * w, 4 * w, 1, 1), C3(12 * w, 4 * w, 1, False)
        self.lat4, self.td3 = Conv(4 * w, 2 * w, 1, 1), C3(6 * w, 2 * w, 1, False)
        self.down3, self.bu4 = Conv(2 * w, 2 * w, 3, 2), C3(4 * w, 4 * w, 1, False)
        self.down4, self.bu5 = Conv(4 * w, 4 * w, 3, 2), C3(8 * w, 8 * w, 1, False)
        self.na, self.no = 3, nc + 5
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in (2 * w, 4 * w, 8 * w))

    def forward(self, x):
        x = self.focus(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))
        p3 = self.b2(self.b1(x))
        p4 = self.b3(p3)
        h5 = self.lat5(self.b4(p4))
        h4 = self.lat4(self.td4(torch.cat([self.up(h5), p4], 1)))
        o3 = self.td3(torch.cat([self.up(h4), p3], 1))
        o4 = self.bu4(torch.cat([self.down3(o3), h4], 1))
        o5 = self.bu5(torch.cat([self.down4(o4), h5], 1))
        out = []
        for conv, f in zip(self.m, (o3, o4, o5)):
            y = conv(f)
            bs, _, ny, nx = y.shape
            out.append(y.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous())
        return out


def ciou(b1, b2, eps=1e-7):
    (x1, y1, w1, h1), (x2, y2, w2, h2) = b1.chunk(4, -1), b2.chunk(4, -1)
    b1x1, b1x2, b1y1, b1y2 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    b2x1, b2x2, b2y1, b2y2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = (b1x2.minimum(b2x2) - b1x1.maximum(b2x1)).clamp(0) * (b1y2.minimum(b2y2) - b1y1.maximum(b2y1)).clamp(0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    cw, ch = b1x2.maximum(b2x2) - b1x1.minimum(b2x1), b1y2.maximum(b2y2) - b1y1.minimum(b2y1)
    rho2 = ((b2x1 + b2x2 - b1x1 - b1x2) ** 2 + (b2y1 + b2y2 - b1y1 - b1y2) ** 2) / 4
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / (cw ** 2 + ch ** 2 + eps) + v * alpha)


class Loss:
    def __init__(self):
        self.bce_cls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0]))
        self.bce_obj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.5]))
        self.anchors = torch.tensor(ANCHORS).float().view(3, -1, 2) / torch.tensor([8., 16., 32.]).view(-1, 1, 1)
        self.off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]]).float() * 0.5

    def __call__(self, p, targets):
        lbox, lobj, lcls = torch.zeros(1), torch.zeros(1), torch.zeros(1)
        nt = targets.shape[0]
        ai = torch.arange(3).float().view(3, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(3, 1, 1), ai[..., None]), 2)
        gain = torch.ones(7)
        for i, pi in enumerate(p):
            anchors = self.anchors[i]
            gain[2:6] = torch.tensor(pi.shape)[[3, 2, 3, 2]]
            t = targets * gain
            r = t[..., 4:6] / anchors[:, None]
            t = t[torch.max(r, 1 / r).max(2)[0] < 4.0]
            gxy, gxi = t[:, 2:4], gain[[2, 3]] - t[:, 2:4]
            j, k = ((gxy % 1 < 0.5) & (gxy > 1)).T
            l, m = ((gxi % 1 < 0.5) & (gxi > 1)).T
            j = torch.stack((torch.ones_like(j), j, k, l, m))
            t = t.repeat((5, 1, 1))[j]
            offsets = (torch.zeros_like(gxy)[None] + self.off[:, None])[j]
            bc, gxy, gwh, a = t.chunk(4, 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            gj, gi = gj.clamp_(0, pi.shape[2] - 1), gi.clamp_(0, pi.shape[3] - 1)
            tobj = torch.zeros(pi.shape[:4])
            if b.shape[0]:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, CLASSES), 1)
                pbox = torch.cat((pxy.sigmoid() * 2 - 0.5, (pwh.sigmoid() * 2) ** 2 * anchors[a]), 1)
                iou = ciou(pbox, torch.cat((gxy - gij, gwh), 1)).squeeze()
                lbox += (1.0 - iou).mean()
                tobj[b, a, gj, gi] = iou.detach().clamp(0)
                tc = torch.full_like(pcls, 0.0)
                tc[range(b.shape[0]), c] = 1.0
                lcls += self.bce_cls(pcls, tc)
            lobj += self.bce_obj(pi[..., 4], tobj) * (4.0, 1.0, 0.4)[i]
        return (0.05 * lbox + lobj + 0.5 * lcls) * p[0].shape[0]


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = []
        for _ in range(4):
            rows = []
            for b in range(BATCH):
                for _ in range(int(r.integers(1, 5))):
                    wh = r.uniform(0.05, 0.5, 2)
                    rows.append([b, int(r.integers(0, CLASSES)), *r.uniform(wh / 2, 1 - wh / 2), *wh])
            x = torch.from_numpy(r.random((BATCH, 3, SIZE, SIZE)).astype(np.float32))
            self.batches.append((x.contiguous(memory_format=torch.channels_last), torch.tensor(rows).float()))
        self.model = YOLOLite()
        load_params(NAME, self.model)
        self.loss = Loss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.002, momentum=0.937, nesterov=True)
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        x, targets = self.batches[self.i % len(self.batches)]
        self.i += 1
        loss = self.loss(self.forward(x), targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss.item()
