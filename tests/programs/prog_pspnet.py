from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
# PSPNet (hszhao/semseg's model/pspnet.py and tool/train.py), scaled down: a dilated
# backbone at output stride 4, the pyramid pooling module (AdaptiveAvgPool2d over bins 1, 2,
# 3, 6 on a 7x7 map, each brought back by interpolate(align_corners=True) and concatenated),
# the loss inside forward in training (CrossEntropyLoss with ignore_index=255 on the main
# and auxiliary heads, argmax predictions returned beside), SGD with a 10x learning rate
# on the new layers under the poly policy set by hand, and intersectionAndUnionGPU's histc
# metric in eval on two scales


class PPM(nn.Module):
    def __init__(self, in_dim, reduction_dim, bins):
        super(PPM, self).__init__()
        self.features = []
        for bin in bins:
            self.features.append(nn.Sequential(
                nn.AdaptiveAvgPool2d(bin),
                nn.Conv2d(in_dim, reduction_dim, kernel_size=1, bias=False),
                nn.BatchNorm2d(reduction_dim),
                nn.ReLU(inplace=True)
            ))
        self.features = nn.ModuleList(self.features)

    def forward(self, x):
        x_size = x.size()
        out = [x]
        for f in self.features:
            out.append(F.interpolate(f(x), x_size[2:], mode='bilinear', align_corners=True))
        return torch.cat(out, 1)


def conv_bn(cin, cout, stride=1, dilation=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, padding=dilation, dilation=dilation, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class PSPNet(nn.Module):
    def __init__(self, bins=(1, 2, 3, 6), dropout=0.0, classes=5, zoom_factor=4,
                 criterion=nn.CrossEntropyLoss(ignore_index=255)):
        super(PSPNet, self).__init__()
        assert 2048 % len(bins) == 0
        assert classes > 1
        assert zoom_factor in [1, 2, 4, 8]
        self.zoom_factor = zoom_factor
        self.criterion = criterion
        self.layer0 = nn.Sequential(conv_bn(3, 16, 2), conv_bn(16, 16), conv_bn(16, 32, 2))
        self.layer3 = nn.Sequential(conv_bn(32, 32, dilation=2), conv_bn(32, 48, dilation=2))
        self.layer4 = nn.Sequential(conv_bn(48, 48, dilation=4), conv_bn(48, 64, dilation=4))
        fea_dim = 64
        self.ppm = PPM(fea_dim, int(fea_dim / len(bins)), bins)
        fea_dim *= 2
        self.cls = nn.Sequential(
            nn.Conv2d(fea_dim, 32, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Dropout2d(p=dropout),
            nn.Conv2d(32, classes, kernel_size=1)
        )
        if self.training:
            self.aux = nn.Sequential(
                nn.Conv2d(48, 16, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(inplace=True),
                nn.Dropout2d(p=dropout),
                nn.Conv2d(16, classes, kernel_size=1)
            )

    def forward(self, x, y=None):
        x_size = x.size()
        assert (x_size[2] - 1) % 4 == 0 and (x_size[3] - 1) % 4 == 0
        h = int((x_size[2] - 1) / 4 * self.zoom_factor + 1)
        w = int((x_size[3] - 1) / 4 * self.zoom_factor + 1)

        x = self.layer0(x)
        x_tmp = self.layer3(x)
        x = self.layer4(x_tmp)
        x = self.ppm(x)
        x = self.cls(x)
        if self.zoom_factor != 1:
            x = F.interpolate(x, size=(h, w), mode='bilinear', align_corners=True)

        if self.training:
            aux = self.aux(x_tmp)
            if self.zoom_factor != 1:
                aux = F.interpolate(aux, size=(h, w), mode='bilinear', align_corners=True)
            main_loss = self.criterion(x, y)
            aux_loss = self.criterion(aux, y)
            return x.max(1)[1], main_loss, aux_loss
        else:
            return x


def poly_learning_rate(base_lr, curr_iter, max_iter, power=0.9):
    lr = base_lr * (1 - float(curr_iter) / max_iter) ** power
    return lr


def intersectionAndUnionGPU(output, target, K, ignore_index=255):
    assert (output.dim() in [1, 2, 3])
    assert output.shape == target.shape
    output = output.view(-1).float()   # histc on CPU takes floating point only
    target = target.view(-1).float()
    output[target == ignore_index] = ignore_index
    intersection = output[output == target]
    area_intersection = torch.histc(intersection, bins=K, min=0, max=K - 1)
    area_output = torch.histc(output, bins=K, min=0, max=K - 1)
    area_target = torch.histc(target, bins=K, min=0, max=K - 1)
    area_union = area_output + area_target - area_intersection
    return area_intersection, area_union, area_target


classes, base_lr, max_iter, aux_weight = 5, 0.01, 4, 0.4
model = PSPNet(classes=classes); sync(model)
modules_ori = [model.layer0, model.layer3, model.layer4]
modules_new = [model.ppm, model.cls, model.aux]
params_list = []
for module in modules_ori:
    params_list.append(dict(params=module.parameters(), lr=base_lr))
for module in modules_new:
    params_list.append(dict(params=module.parameters(), lr=base_lr * 10))
index_split = 3
optimizer = torch.optim.SGD(params_list, lr=base_lr, momentum=0.9, weight_decay=1e-4)
net = comp(model, fullgraph=True)
rng = np.random.default_rng(0)


def batch(n=4, size=25):
    image = torch.from_numpy(rng.standard_normal((n, 3, size, size)).astype(np.float32))
    # a blocky label map with an ignored border, as crops padded with 255 give
    lab = rng.integers(0, classes, (n, 1, 5, 5))
    target = np.kron(lab, np.ones((1, 1, 5, 5), np.int64))[:, 0]
    target[:, :, -3:] = 255
    return image, torch.from_numpy(target)


LOSSES = []
for curr_iter in range(max_iter - 1):
    input, target = batch()
    output, main_loss, aux_loss = net(input, target)
    loss = main_loss + aux_weight * aux_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    current_lr = poly_learning_rate(base_lr, curr_iter + 1, max_iter)
    for index in range(0, index_split):
        optimizer.param_groups[index]['lr'] = current_lr
    for index in range(index_split, len(optimizer.param_groups)):
        optimizer.param_groups[index]['lr'] = current_lr * 10
    intersection, union, tgt = intersectionAndUnionGPU(output, target, classes, 255)
    LOSSES += [main_loss.item(), aux_loss.item(), (intersection.sum() / (union.sum() + 1e-10)).item()]
model.eval()
with torch.no_grad():
    input, target = batch(2)
    output = F.softmax(net(input), dim=1)
    # a second scale, as test.py's multi-scale inference: the 33x33 input's logits resized back
    large = F.interpolate(input, size=(33, 33), mode='bilinear', align_corners=True)
    output = output + F.interpolate(F.softmax(net(large), dim=1), size=(25, 25), mode='bilinear',
                                    align_corners=True)
    prediction = output.max(1)[1]
    intersection, union, tgt = intersectionAndUnionGPU(prediction, target, classes, 255)
LOSSES += intersection.tolist() + union.tolist() + [output.sum().item(), output[:, 1].std().item()]
