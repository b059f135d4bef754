from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# ENet (Paszke et al. 2016, as davidtvs/PyTorch-ENet writes it), scaled down: an initial
# block concatenating a strided conv with a max-pool, bottlenecks with PReLU, dilated and
# asymmetric (5x1 then 1x5) convs and Dropout2d (p=0 here: the two frameworks draw different streams), downsampling bottlenecks keeping
# MaxPool2d(return_indices=True) indices that the decoder's MaxUnpool2d uses (output_size
# given), zero-padded channel growth on the main branch; trained on synthetic shapes by
# class-weighted cross-entropy (ENet's 1/log(c + p) weights) plus the Lovasz-softmax loss
# (Berman et al.; errors sorted descending, the Jaccard gradient by cumsum, ignore index
# filtered by boolean masks) under Adam and a StepLR; mean IoU from a confusion matrix by
# bincount in eval


class InitialBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.main_branch = nn.Conv2d(in_channels, out_channels - in_channels, 3, stride=2, padding=1, bias=False)
        self.ext_branch = nn.MaxPool2d(3, stride=2, padding=1)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.out_activation = nn.PReLU()

    def forward(self, x):
        out = torch.cat((self.main_branch(x), self.ext_branch(x)), 1)
        return self.out_activation(self.batch_norm(out))


class RegularBottleneck(nn.Module):
    def __init__(self, channels, internal_ratio=4, kernel_size=3, padding=0, dilation=1,
                 asymmetric=False, dropout_prob=0.0):
        super().__init__()
        internal_channels = channels // internal_ratio
        self.ext_conv1 = nn.Sequential(nn.Conv2d(channels, internal_channels, 1, bias=False),
                                       nn.BatchNorm2d(internal_channels), nn.PReLU())
        if asymmetric:
            self.ext_conv2 = nn.Sequential(
                nn.Conv2d(internal_channels, internal_channels, (kernel_size, 1), padding=(padding, 0), bias=False),
                nn.BatchNorm2d(internal_channels), nn.PReLU(),
                nn.Conv2d(internal_channels, internal_channels, (1, kernel_size), padding=(0, padding), bias=False),
                nn.BatchNorm2d(internal_channels), nn.PReLU())
        else:
            self.ext_conv2 = nn.Sequential(
                nn.Conv2d(internal_channels, internal_channels, kernel_size, padding=padding,
                          dilation=dilation, bias=False),
                nn.BatchNorm2d(internal_channels), nn.PReLU())
        self.ext_conv3 = nn.Sequential(nn.Conv2d(internal_channels, channels, 1, bias=False),
                                       nn.BatchNorm2d(channels), nn.PReLU())
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = nn.PReLU()

    def forward(self, x):
        main = x
        ext = self.ext_regul(self.ext_conv3(self.ext_conv2(self.ext_conv1(x))))
        return self.out_activation(main + ext)


class DownsamplingBottleneck(nn.Module):
    def __init__(self, in_channels, out_channels, internal_ratio=4, dropout_prob=0.0):
        super().__init__()
        internal_channels = in_channels // internal_ratio
        self.main_max1 = nn.MaxPool2d(2, stride=2, return_indices=True)
        self.ext_conv1 = nn.Sequential(nn.Conv2d(in_channels, internal_channels, 2, stride=2, bias=False),
                                       nn.BatchNorm2d(internal_channels), nn.PReLU())
        self.ext_conv2 = nn.Sequential(nn.Conv2d(internal_channels, internal_channels, 3, padding=1, bias=False),
                                       nn.BatchNorm2d(internal_channels), nn.PReLU())
        self.ext_conv3 = nn.Sequential(nn.Conv2d(internal_channels, out_channels, 1, bias=False),
                                       nn.BatchNorm2d(out_channels), nn.PReLU())
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = nn.PReLU()

    def forward(self, x):
        main, max_indices = self.main_max1(x)
        ext = self.ext_regul(self.ext_conv3(self.ext_conv2(self.ext_conv1(x))))
        n, ch_ext, h, w = ext.size()
        ch_main = main.size()[1]
        padding = torch.zeros(n, ch_ext - ch_main, h, w)
        main = torch.cat((main, padding), 1)
        return self.out_activation(main + ext), max_indices


class UpsamplingBottleneck(nn.Module):
    def __init__(self, in_channels, out_channels, internal_ratio=4, dropout_prob=0.0):
        super().__init__()
        internal_channels = in_channels // internal_ratio
        self.main_conv1 = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False),
                                        nn.BatchNorm2d(out_channels))
        self.main_unpool1 = nn.MaxUnpool2d(kernel_size=2)
        self.ext_conv1 = nn.Sequential(nn.Conv2d(in_channels, internal_channels, 1, bias=False),
                                       nn.BatchNorm2d(internal_channels), nn.PReLU())
        self.ext_tconv1 = nn.ConvTranspose2d(internal_channels, internal_channels, 2, stride=2, bias=False)
        self.ext_tconv1_bnorm = nn.BatchNorm2d(internal_channels)
        self.ext_tconv1_activation = nn.PReLU()
        self.ext_conv2 = nn.Sequential(nn.Conv2d(internal_channels, out_channels, 1, bias=False),
                                       nn.BatchNorm2d(out_channels))
        self.ext_regul = nn.Dropout2d(p=dropout_prob)
        self.out_activation = nn.PReLU()

    def forward(self, x, max_indices, output_size):
        main = self.main_unpool1(self.main_conv1(x), max_indices, output_size=output_size)
        ext = self.ext_conv1(x)
        ext = self.ext_tconv1(ext, output_size=output_size)
        ext = self.ext_tconv1_activation(self.ext_tconv1_bnorm(ext))
        ext = self.ext_regul(self.ext_conv2(ext))
        return self.out_activation(main + ext)


class ENet(nn.Module):
    def __init__(self, num_classes, c=(16, 32, 48)):
        super().__init__()
        self.initial_block = InitialBlock(3, c[0])
        self.downsample1_0 = DownsamplingBottleneck(c[0], c[1], dropout_prob=0.0)
        self.regular1_1 = RegularBottleneck(c[1], padding=1, dropout_prob=0.0)
        self.downsample2_0 = DownsamplingBottleneck(c[1], c[2], dropout_prob=0.0)
        self.dilated2_1 = RegularBottleneck(c[2], dilation=2, padding=2, dropout_prob=0.0)
        self.asymmetric2_2 = RegularBottleneck(c[2], kernel_size=5, padding=2, asymmetric=True, dropout_prob=0.0)
        self.dilated2_3 = RegularBottleneck(c[2], dilation=4, padding=4, dropout_prob=0.0)
        self.upsample4_0 = UpsamplingBottleneck(c[2], c[1], dropout_prob=0.0)
        self.regular4_1 = RegularBottleneck(c[1], padding=1, dropout_prob=0.0)
        self.upsample5_0 = UpsamplingBottleneck(c[1], c[0], dropout_prob=0.0)
        self.transposed_conv = nn.ConvTranspose2d(c[0], num_classes, 3, stride=2, padding=1, bias=False)

    def forward(self, x):
        input_size = x.size()
        x = self.initial_block(x)
        stage1_input_size = x.size()
        x, max_indices1_0 = self.downsample1_0(x)
        x = self.regular1_1(x)
        stage2_input_size = x.size()
        x, max_indices2_0 = self.downsample2_0(x)
        x = self.dilated2_1(x)
        x = self.asymmetric2_2(x)
        x = self.dilated2_3(x)
        x = self.upsample4_0(x, max_indices2_0, output_size=stage2_input_size)
        x = self.regular4_1(x)
        x = self.upsample5_0(x, max_indices1_0, output_size=stage1_input_size)
        return self.transposed_conv(x, output_size=input_size)


def lovasz_grad(gt_sorted):
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1. - intersection / union
    if p > 1:
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def lovasz_softmax_flat(probas, labels):
    C = probas.size(1)
    losses = []
    for c in range(C):
        fg = (labels == c).float()
        if fg.sum() == 0:
            continue
        errors = (fg - probas[:, c]).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg_sorted)))
    return torch.stack(losses).mean()


def lovasz_softmax(logits, labels, ignore=255):
    probas = F.softmax(logits, dim=1)
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)
    labels = labels.view(-1)
    valid = labels != ignore
    return lovasz_softmax_flat(probas[valid], labels[valid])


def make_batch(rng, n, size=32, classes=4):
    """Images of a random rectangle and disc on noise; the label map, its border ignored."""
    img = rng.standard_normal((n, 3, size, size)).astype(np.float32) * 0.3
    lab = np.zeros((n, size, size), np.int64)
    yy, xx = np.mgrid[:size, :size]
    for i in range(n):
        y0, x0 = rng.integers(2, size // 2, 2)
        lab[i, y0:y0 + size // 3, x0:x0 + size // 4] = 1
        cy, cx = rng.integers(size // 3, size - 4, 2)
        lab[i][(yy - cy) ** 2 + (xx - cx) ** 2 < 25] = 2
        lab[i][(yy + xx) % 11 == 0] = 3
        for c in range(1, classes):
            img[i, c % 3][lab[i] == c] += 0.8 * c
    lab[:, 0, :] = 255
    return torch.from_numpy(img), torch.from_numpy(lab)


def enet_weighing(labels, num_classes, c=1.02):
    counts = torch.bincount(labels[labels != 255].flatten(), minlength=num_classes).float()
    propensity = counts / counts.sum()
    return 1 / torch.log(c + propensity)


NUM_CLASSES = 4
rng = np.random.default_rng(0)
train = [make_batch(rng, 4) for _ in range(3)]
val_x, val_y = make_batch(rng, 4)
model = ENet(NUM_CLASSES); sync(model)
fwd = comp(model, fullgraph=True)
class_weights = enet_weighing(torch.cat([y for _, y in train]), NUM_CLASSES)
criterion = nn.CrossEntropyLoss(weight=class_weights, ignore_index=255)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=2e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
LOSSES = [float(w) for w in class_weights]
model.train()
for x, y in train:
    out = fwd(x)
    loss = criterion(out, y) + lovasz_softmax(out, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), scheduler.get_last_lr()[0]]
model.eval()
with torch.no_grad():
    pred = fwd(val_x).argmax(1)
valid = val_y != 255
conf = torch.bincount(NUM_CLASSES * val_y[valid] + pred[valid], minlength=NUM_CLASSES ** 2).view(NUM_CLASSES, NUM_CLASSES)
iou = conf.diag().float() / (conf.sum(0) + conf.sum(1) - conf.diag()).clamp(min=1).float()
LOSSES += [iou.mean().item()]
