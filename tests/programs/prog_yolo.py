from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# A YOLOv5-lite detector written as ultralytics writes it: Focus (space-to-depth by strided
# slicing), C3 blocks of Bottlenecks with SiLU, SPPF (one max_pool2d chained three times),
# an FPN/PAN neck of nn.Upsample and torch.cat, a Detect head over three scales whose
# outputs are reshaped by view/permute, grids from meshgrid(indexing="ij"), sigmoid
# decoding, CIoU box loss, BCEWithLogits objectness with pos_weight, targets assigned by
# anchor-ratio masks over the centre cell and two neighbours.
def autopad(k, p=None):
    return k // 2 if p is None else p
class Conv(nn.Module):
    default_act = nn.SiLU()
    def __init__(self, c1, c2, k=1, s=1, p=None, g=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p), groups=g, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
        self.act = self.default_act if act is True else act if isinstance(act, nn.Module) else nn.Identity()
    def forward(self, x):
        return self.act(self.bn(self.conv(x)))
class Focus(nn.Module):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = Conv(c1 * 4, c2, k, s)
    def forward(self, x):  # x(b,c,w,h) -> y(b,4c,w/2,h/2)
        return self.conv(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))
class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_, c2, 3, 1, g=g)
        self.add = shortcut and c1 == c2
    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))
class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True, g=1, e=0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c1, c_, 1, 1)
        self.cv3 = Conv(2 * c_, c2, 1)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, e=1.0) for _ in range(n)))
    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))
class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)
    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))
class Detect(nn.Module):
    stride = None
    def __init__(self, nc=3, anchors=(), ch=()):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.grid = [torch.empty(0) for _ in range(self.nl)]
        self.anchor_grid = [torch.empty(0) for _ in range(self.nl)]
        self.register_buffer("anchors", torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)
    def forward(self, x):
        z = []
        for i in range(self.nl):
            x[i] = self.m[i](x[i])
            bs, _, ny, nx = x[i].shape
            x[i] = x[i].view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            if not self.training:
                if self.grid[i].shape[2:4] != x[i].shape[2:4]:
                    self.grid[i], self.anchor_grid[i] = self._make_grid(nx, ny, i)
                xy, wh, conf = x[i].sigmoid().split((2, 2, self.nc + 1), 4)
                xy = (xy * 2 + self.grid[i]) * self.stride[i]
                wh = (wh * 2) ** 2 * self.anchor_grid[i]
                y = torch.cat((xy, wh, conf), 4)
                z.append(y.view(bs, self.na * nx * ny, self.no))
        return x if self.training else (torch.cat(z, 1), x)
    def _make_grid(self, nx=20, ny=20, i=0):
        d = self.anchors[i].device
        t = self.anchors[i].dtype
        shape = 1, self.na, ny, nx, 2
        y, x = torch.arange(ny, device=d, dtype=t), torch.arange(nx, device=d, dtype=t)
        yv, xv = torch.meshgrid(y, x, indexing="ij")
        grid = torch.stack((xv, yv), 2).expand(shape) - 0.5
        anchor_grid = (self.anchors[i] * self.stride[i]).view((1, self.na, 1, 1, 2)).expand(shape)
        return grid, anchor_grid
class YOLOLite(nn.Module):
    def __init__(self, nc=3, w=8):
        super().__init__()
        anchors = ([10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326])
        self.b0 = Focus(3, w, 3)                                                  # /2
        self.b1 = nn.Sequential(Conv(w, 2 * w, 3, 2), C3(2 * w, 2 * w, 1))         # /4
        self.b2 = nn.Sequential(Conv(2 * w, 4 * w, 3, 2), C3(4 * w, 4 * w, 2))     # /8  P3
        self.b3 = nn.Sequential(Conv(4 * w, 8 * w, 3, 2), C3(8 * w, 8 * w, 1))     # /16 P4
        self.b4 = nn.Sequential(Conv(8 * w, 8 * w, 3, 2), SPPF(8 * w, 8 * w, 5))   # /32 P5
        self.up = nn.Upsample(None, 2, "nearest")
        self.lat5 = Conv(8 * w, 4 * w, 1, 1)
        self.td4 = C3(12 * w, 4 * w, 1, False)
        self.lat4 = Conv(4 * w, 2 * w, 1, 1)
        self.td3 = C3(6 * w, 2 * w, 1, False)
        self.down3 = Conv(2 * w, 2 * w, 3, 2)
        self.bu4 = C3(4 * w, 4 * w, 1, False)
        self.down4 = Conv(4 * w, 4 * w, 3, 2)
        self.bu5 = C3(8 * w, 8 * w, 1, False)
        self.detect = Detect(nc, anchors, (2 * w, 4 * w, 8 * w))
        self.detect.stride = torch.tensor([8., 16., 32.])
        self.detect.anchors /= self.detect.stride.view(-1, 1, 1)
        for mi, s in zip(self.detect.m, self.detect.stride):  # ultralytics' _initialize_biases
            b = mi.bias.view(self.detect.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5:5 + nc] += math.log(0.6 / (nc - 0.99999))
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)
    def forward(self, x):
        p3 = self.b2(self.b1(self.b0(x)))
        p4 = self.b3(p3)
        p5 = self.b4(p4)
        h5 = self.lat5(p5)
        t4 = self.td4(torch.cat([self.up(h5), p4], 1))
        h4 = self.lat4(t4)
        o3 = self.td3(torch.cat([self.up(h4), p3], 1))
        o4 = self.bu4(torch.cat([self.down3(o3), h4], 1))
        o5 = self.bu5(torch.cat([self.down4(o4), h5], 1))
        return self.detect([o3, o4, o5])
def bbox_iou(box1, box2, xywh=True, CIoU=False, eps=1e-7):
    if xywh:
        (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
        w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
        b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
        b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp(0) * \
            (b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if CIoU:
        cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)
        ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)
        c2 = cw ** 2 + ch ** 2 + eps
        rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
        v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
        with torch.no_grad():
            alpha = v / (v - iou + (1 + eps))
        return iou - (rho2 / c2 + v * alpha)
    return iou
class ComputeLoss:
    def __init__(self, model, anchor_t=4.0):
        det = model.detect
        self.BCEcls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0]))
        self.BCEobj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.5]))
        self.balance = [4.0, 1.0, 0.4]
        self.na, self.nc, self.nl, self.anchors = det.na, det.nc, det.nl, det.anchors
        self.anchor_t = anchor_t
        self.hyp = {"box": 0.05, "obj": 1.0, "cls": 0.5}
    def __call__(self, p, targets):
        lcls = torch.zeros(1)
        lbox = torch.zeros(1)
        lobj = torch.zeros(1)
        tcls, tbox, indices, anchors = self.build_targets(p, targets)
        for i, pi in enumerate(p):
            b, a, gj, gi = indices[i]
            tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype)
            n = b.shape[0]
            if n:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, self.nc), 1)
                pxy = pxy.sigmoid() * 2 - 0.5
                pwh = (pwh.sigmoid() * 2) ** 2 * anchors[i]
                pbox = torch.cat((pxy, pwh), 1)
                iou = bbox_iou(pbox, tbox[i], CIoU=True).squeeze()
                lbox += (1.0 - iou).mean()
                iou = iou.detach().clamp(0).type(tobj.dtype)
                tobj[b, a, gj, gi] = iou
                t = torch.full_like(pcls, 0.0)
                t[range(n), tcls[i]] = 1.0
                lcls += self.BCEcls(pcls, t)
            obji = self.BCEobj(pi[..., 4], tobj)
            lobj += obji * self.balance[i]
        bs = p[0].shape[0]
        lbox *= self.hyp["box"]; lobj *= self.hyp["obj"]; lcls *= self.hyp["cls"]
        return (lbox + lobj + lcls) * bs, torch.cat((lbox, lobj, lcls)).detach()
    def build_targets(self, p, targets):
        na, nt = self.na, targets.shape[0]
        tcls, tbox, indices, anch = [], [], [], []
        gain = torch.ones(7)
        ai = torch.arange(na).float().view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)
        g = 0.5
        off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]]).float() * g
        for i in range(self.nl):
            anchors, shape = self.anchors[i], p[i].shape
            gain[2:6] = torch.tensor(shape)[[3, 2, 3, 2]]
            t = targets * gain
            if nt:
                r = t[..., 4:6] / anchors[:, None]
                j = torch.max(r, 1 / r).max(2)[0] < self.anchor_t
                t = t[j]
                gxy = t[:, 2:4]
                gxi = gain[[2, 3]] - gxy
                j, k = ((gxy % 1 < g) & (gxy > 1)).T
                l, m = ((gxi % 1 < g) & (gxi > 1)).T
                j = torch.stack((torch.ones_like(j), j, k, l, m))
                t = t.repeat((5, 1, 1))[j]
                offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]
            else:
                t = targets[0]
                offsets = 0
            bc, gxy, gwh, a = t.chunk(4, 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            gj = gj.clamp_(0, shape[2] - 1); gi = gi.clamp_(0, shape[3] - 1)
            indices.append((b, a, gj, gi))
            tbox.append(torch.cat((gxy - gij, gwh), 1))
            anch.append(anchors[a])
            tcls.append(c)
        return tcls, tbox, indices, anch

model = YOLOLite(); sync(model)
net = comp(model)
compute_loss = ComputeLoss(model)
g0, g1, g2 = [], [], []   # ultralytics' three parameter groups: BN weights, weights, biases
bn = tuple(v for k, v in nn.__dict__.items() if "Norm" in k)
for v in model.modules():
    for p_name, p in v.named_parameters(recurse=False):
        if p_name == "bias":
            g2.append(p)
        elif p_name == "weight" and isinstance(v, bn):
            g1.append(p)
        else:
            g0.append(p)
opt = torch.optim.SGD(g2, lr=0.002, momentum=0.937, nesterov=True)
opt.add_param_group({"params": g0, "weight_decay": 5e-4})
opt.add_param_group({"params": g1, "weight_decay": 0.0})
rng = np.random.default_rng(0)
LOSSES = []
S = 64
def batch(bs=2):
    imgs = torch.from_numpy(rng.random((bs, 3, S, S)).astype(np.float32))
    rows = []
    for b in range(bs):
        for _ in range(int(rng.integers(1, 4))):
            wh = rng.uniform(0.1, 0.6, 2); xy = rng.uniform(wh / 2, 1 - wh / 2)
            rows.append([b, int(rng.integers(0, 3)), *xy, *wh])
    return imgs, torch.tensor(rows, dtype=torch.float32)   # (image, class, x, y, w, h)
model.train()
for step in range(4):
    imgs, targets = batch()
    imgs = imgs.contiguous(memory_format=torch.channels_last)
    pred = net(imgs)
    loss, loss_items = compute_loss(pred, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    opt.step()
    LOSSES += [loss.item(), *loss_items.tolist()]
model.eval()
with torch.no_grad():
    out, train_out = net(imgs)
    out = (out + net(imgs.flip(-1))[0]) / 2   # the second call reuses the grids it made
    conf = out[..., 4] * out[..., 5:].max(-1)[0]
    top = conf.topk(10, dim=1)
    LOSSES += [out[..., :4].sum().item(), conf.sum().item(), top.values.sum().item(),
               float(out.shape[1]), model.b2[1].cv1.bn.running_var.sum().item()]
