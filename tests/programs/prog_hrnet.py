from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# An HRNet-lite pose estimator as the deep-high-resolution-net repository writes it:
# parallel resolution branches of BasicBlocks in nn.ModuleLists, fusion by strided 3x3
# convs down and 1x1 conv + nn.Upsample(mode="nearest") up, summed; a transition adding a
# branch; the JointsMSELoss with per-joint target weights on Gaussian heatmaps; an
# integral (soft-argmax) readout: softmax over the flattened heatmaps, expectation over
# arange grids, L1 on coordinates. Adam under a MultiStepLR.
BN_MOMENTUM = 0.1
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)
class BasicBlock(nn.Module):
    expansion = 1
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes, momentum=BN_MOMENTUM)
        self.downsample = downsample
    def forward(self, x):
        residual = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        return self.relu(out)
class HighResolutionModule(nn.Module):
    def __init__(self, num_branches, num_blocks, num_channels, multi_scale_output=True):
        super(HighResolutionModule, self).__init__()
        self.num_inchannels = list(num_channels)
        self.num_branches = num_branches
        self.multi_scale_output = multi_scale_output
        self.branches = nn.ModuleList([
            nn.Sequential(*[BasicBlock(num_channels[i], num_channels[i]) for _ in range(num_blocks[i])])
            for i in range(num_branches)])
        self.fuse_layers = self._make_fuse_layers()
        self.relu = nn.ReLU(True)
    def _make_fuse_layers(self):
        num_branches, num_inchannels = self.num_branches, self.num_inchannels
        fuse_layers = []
        for i in range(num_branches if self.multi_scale_output else 1):
            fuse_layer = []
            for j in range(num_branches):
                if j > i:
                    fuse_layer.append(nn.Sequential(
                        nn.Conv2d(num_inchannels[j], num_inchannels[i], 1, 1, 0, bias=False),
                        nn.BatchNorm2d(num_inchannels[i]),
                        nn.Upsample(scale_factor=2 ** (j - i), mode="nearest")))
                elif j == i:
                    fuse_layer.append(None)
                else:
                    conv3x3s = []
                    for k in range(i - j):
                        last = k == i - j - 1
                        out_ch = num_inchannels[i] if last else num_inchannels[j]
                        layers = [nn.Conv2d(num_inchannels[j], out_ch, 3, 2, 1, bias=False), nn.BatchNorm2d(out_ch)]
                        if not last:
                            layers.append(nn.ReLU(True))
                        conv3x3s.append(nn.Sequential(*layers))
                    fuse_layer.append(nn.Sequential(*conv3x3s))
            fuse_layers.append(nn.ModuleList(fuse_layer))
        return nn.ModuleList(fuse_layers)
    def forward(self, x):
        if self.num_branches == 1:
            return [self.branches[0](x[0])]
        for i in range(self.num_branches):
            x[i] = self.branches[i](x[i])
        x_fuse = []
        for i in range(len(self.fuse_layers)):
            y = x[0] if i == 0 else self.fuse_layers[i][0](x[0])
            for j in range(1, self.num_branches):
                if i == j:
                    y = y + x[j]
                else:
                    y = y + self.fuse_layers[i][j](x[j])
            x_fuse.append(self.relu(y))
        return x_fuse
class PoseHighResolutionNet(nn.Module):
    def __init__(self, num_joints=5, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(16, 16)
        self.transition1 = nn.ModuleList([
            nn.Sequential(nn.Conv2d(16, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)),
            nn.Sequential(nn.Conv2d(16, 2 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU(inplace=True))])
        self.stage2 = HighResolutionModule(2, [1, 1], [c, 2 * c])
        self.transition2 = nn.ModuleList([
            None, None,
            nn.Sequential(nn.Conv2d(2 * c, 4 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(4 * c), nn.ReLU(inplace=True))])
        self.stage3 = nn.Sequential(HighResolutionModule(3, [1, 1, 1], [c, 2 * c, 4 * c]),
                                    HighResolutionModule(3, [1, 1, 1], [c, 2 * c, 4 * c], multi_scale_output=False))
        self.final_layer = nn.Conv2d(c, num_joints, kernel_size=1, stride=1, padding=0)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.001 if m is self.final_layer else 0.05)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        x = self.layer1(x)
        x_list = [t(x) for t in self.transition1]
        y_list = self.stage2(x_list)
        x_list = []
        for i in range(3):
            if self.transition2[i] is not None:
                x_list.append(self.transition2[i](y_list[-1]))
            else:
                x_list.append(y_list[i])
        y_list = self.stage3(x_list)
        return self.final_layer(y_list[0])
class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight):
        super(JointsMSELoss, self).__init__()
        self.criterion = nn.MSELoss(reduction="mean")
        self.use_target_weight = use_target_weight
    def forward(self, output, target, target_weight):
        batch_size = output.size(0)
        num_joints = output.size(1)
        heatmaps_pred = output.reshape((batch_size, num_joints, -1)).split(1, 1)
        heatmaps_gt = target.reshape((batch_size, num_joints, -1)).split(1, 1)
        loss = 0
        for idx in range(num_joints):
            heatmap_pred = heatmaps_pred[idx].squeeze()
            heatmap_gt = heatmaps_gt[idx].squeeze()
            if self.use_target_weight:
                loss += 0.5 * self.criterion(heatmap_pred.mul(target_weight[:, idx]), heatmap_gt.mul(target_weight[:, idx]))
            else:
                loss += 0.5 * self.criterion(heatmap_pred, heatmap_gt)
        return loss / num_joints
def soft_argmax(heatmaps, beta=10.0):
    n, k, h, w = heatmaps.shape
    prob = F.softmax(beta * heatmaps.reshape(n, k, -1), dim=2).reshape(n, k, h, w)
    xs = torch.arange(w, dtype=heatmaps.dtype, device=heatmaps.device)
    ys = torch.arange(h, dtype=heatmaps.dtype, device=heatmaps.device)
    x = (prob.sum(dim=2) * xs).sum(dim=2)
    y = (prob.sum(dim=3) * ys).sum(dim=2)
    return torch.stack((x, y), dim=-1)   # (n, k, 2) in heatmap pixels
def gaussian_targets(joints, visible, size=16, sigma=1.5):
    yy, xx = np.mgrid[0:size, 0:size]
    hm = np.exp(-((xx[None, None] - joints[..., 0, None, None]) ** 2 + (yy[None, None] - joints[..., 1, None, None]) ** 2)
                / (2 * sigma ** 2)).astype(np.float32)
    return torch.from_numpy(hm * visible[..., None, None]), torch.from_numpy(visible[..., None].astype(np.float32))
model = PoseHighResolutionNet(); sync(model)
net = comp(model)
criterion = JointsMSELoss(use_target_weight=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, [3], 0.1)
rng = np.random.default_rng(0)
LOSSES = []
for step in range(5):
    img = torch.from_numpy(rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    joints = rng.uniform(2, 14, (2, 5, 2)).astype(np.float32)
    visible = (rng.random((2, 5)) > 0.2).astype(np.float32)
    target, target_weight = gaussian_targets(joints, visible)
    output = net(img)
    coords = soft_argmax(output)
    l_coord = (F.l1_loss(coords, torch.from_numpy(joints), reduction="none") * target_weight).sum() / target_weight.sum().clamp(min=1)
    l_hm = criterion(output, target, target_weight)
    loss = 1000 * l_hm + 0.01 * l_coord
    opt.zero_grad()
    loss.backward()
    opt.step(); sched.step()
    LOSSES += [loss.item(), l_hm.item(), l_coord.item()]
model.eval()
with torch.no_grad():
    out = net(img)
    flipped = net(img.flip(3)).flip(3)
    avg = (out + flipped) * 0.5
    maxvals, idx = torch.max(avg.reshape(2, 5, -1), 2)
    preds = torch.stack([idx % 16, torch.div(idx, 16, rounding_mode="floor")], -1).float()
    # (an argmax's integer coordinates could flip on a near tie: kept out of the comparison)
    LOSSES += [avg.abs().sum().item(), soft_argmax(avg).sum().item(), maxvals.sum().item(),
               float(preds.shape[1])]
