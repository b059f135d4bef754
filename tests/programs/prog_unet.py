from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
class DoubleConv(nn.Module):
    def __init__(s, i, o, mid=None):
        super().__init__(); mid = mid or o
        s.double_conv = nn.Sequential(nn.Conv2d(i, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                                      nn.Conv2d(mid, o, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
    def forward(s, x): return s.double_conv(x)
class Down(nn.Module):
    def __init__(s, i, o):
        super().__init__(); s.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(i, o))
    def forward(s, x): return s.maxpool_conv(x)
class Up(nn.Module):
    def __init__(s, i, o, bilinear=True):
        super().__init__()
        if bilinear:
            s.up = nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True); s.conv = DoubleConv(i, o, i // 2)
        else:
            s.up = nn.ConvTranspose2d(i, i // 2, kernel_size=2, stride=2); s.conv = DoubleConv(i, o)
    def forward(s, x1, x2):
        x1 = s.up(x1)
        diffY = x2.size()[2] - x1.size()[2]; diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        return s.conv(torch.cat([x2, x1], dim=1))
class UNet(nn.Module):
    def __init__(s, n_channels=3, n_classes=2, bilinear=False):
        super().__init__()
        s.inc = DoubleConv(n_channels, 8); s.down1 = Down(8, 16); s.down2 = Down(16, 32)
        f = 2 if bilinear else 1
        s.down3 = Down(32, 64 // f); s.up1 = Up(64, 32 // f, bilinear); s.up2 = Up(32, 16 // f, bilinear); s.up3 = Up(16, 8, bilinear)
        s.outc = nn.Conv2d(8, n_classes, kernel_size=1)
    def forward(s, x):
        x1 = s.inc(x); x2 = s.down1(x1); x3 = s.down2(x2); x4 = s.down3(x3)
        x = s.up1(x4, x3); x = s.up2(x, x2); x = s.up3(x, x1)
        return s.outc(x)
LOSSES = []
for bil in (False, True):
    torch.manual_seed(0)
    net = UNet(bilinear=bil); sync(net)
    opt = torch.optim.RMSprop(net.parameters(), lr=1e-5, weight_decay=1e-8, momentum=0.999, foreach=True)
    r = np.random.default_rng(0)
    fwd = comp(net)
    crit = nn.CrossEntropyLoss()
    for i in range(2):
        img = torch.from_numpy(r.random((2, 3, 36, 36)).astype(np.float32))
        mask = torch.from_numpy(r.integers(0, 2, (2, 36, 36)))
        pred = fwd(img)
        loss = crit(pred, mask)
        loss += 1 - (2 * (F.softmax(pred, dim=1).float() * F.one_hot(mask, 2).permute(0, 3, 1, 2).float()).sum() + 1e-6) / (F.softmax(pred, dim=1).sum() + F.one_hot(mask, 2).sum() + 1e-6)
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0); opt.step()
        LOSSES.append(loss.item())
