from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# PixelCNN (van den Oord et al. 2016) on binarized images as the common PyTorch ports
# write it: Conv2d subclasses whose weight is multiplied by a registered causal mask
# (type A for the first layer, B after), 1x1 output to 2 classes per pixel, and sampling
# pixel by pixel in raster order
class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, **kwargs):
        super(MaskedConv2d, self).__init__(*args, **kwargs)
        assert mask_type in {'A', 'B'}
        self.register_buffer('mask', self.weight.data.clone())
        _, _, kH, kW = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kH // 2, kW // 2 + (mask_type == 'B'):] = 0
        self.mask[:, :, kH // 2 + 1:] = 0
    def forward(self, x):
        self.weight.data *= self.mask
        return super(MaskedConv2d, self).forward(x)
fm = 16
net = nn.Sequential(
    MaskedConv2d('A', 1, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
    MaskedConv2d('B', fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
    MaskedConv2d('B', fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
    MaskedConv2d('B', fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
    nn.Conv2d(fm, 2, 1))
sync(net)
model = comp(net)
optimizer = torch.optim.Adam(net.parameters())
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    net.train()
    img = (r.random((4, 1, 10, 10)) < np.linspace(0.2, 0.8, 10)[None, None, :, None]).astype(np.float32)
    input = torch.from_numpy(img)
    target = (input.data[:, 0] * 1).long()
    loss = F.cross_entropy(model(input), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
net.eval()
sample = torch.zeros(2, 1, 6, 6)
with torch.no_grad():
    for i in range(6):
        for j in range(6):
            out = model(sample)
            probs = F.softmax(out[:, :, i, j], dim=1)
            sample[:, :, i, j] = (probs[:, 1:] > 0.5).float()   # the most likely value: deterministic
    LOSSES += [sample.sum().item(), out.abs().mean().item()]
    # the mask keeps the weights causal: a pixel's logits do not depend on itself or later pixels
    x = torch.from_numpy(r.random((1, 1, 6, 6)).astype(np.float32)); y = x.clone(); y[0, 0, 3, 3] += 1
    d = (net(x) - net(y)).abs().sum(1)[0]
    LOSSES += [float(d.flatten()[:3 * 6 + 4].max() == 0), float(d[3, 4] > 0)]
