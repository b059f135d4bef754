from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# ESRGAN (xinntao/BasicSR's RRDBNet and VGG-style discriminator), scaled down: residual
# dense blocks whose convs read the concatenation of every earlier output, residual
# scaling by 0.2, kaiming init scaled by 0.1 in place, x4 upsampling by nearest
# interpolate (RRDBNet) and by PixelShuffle (an SRResNet-style tail); the relativistic
# average GAN loss (each side against the other's detached mean), an L1 pixel loss and a
# feature loss through a frozen conv extractor, two Adams under MultiStepLR


@torch.no_grad()
def default_init_weights(module_list, scale=1, bias_fill=0, **kwargs):
    if not isinstance(module_list, list):
        module_list = [module_list]
    for module in module_list:
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, **kwargs)
                m.weight.data *= scale
                if m.bias is not None:
                    m.bias.data.fill_(bias_fill)


def make_layer(basic_block, num_basic_block, **kwarg):
    layers = []
    for _ in range(num_basic_block):
        layers.append(basic_block(**kwarg))
    return nn.Sequential(*layers)


class ResidualDenseBlock(nn.Module):
    def __init__(self, num_feat=64, num_grow_ch=32):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_grow_ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat + num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv3 = nn.Conv2d(num_feat + 2 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv4 = nn.Conv2d(num_feat + 3 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv5 = nn.Conv2d(num_feat + 4 * num_grow_ch, num_feat, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        default_init_weights([self.conv1, self.conv2, self.conv3, self.conv4, self.conv5], 0.1)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, num_feat, num_grow_ch=32):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb2 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb3 = ResidualDenseBlock(num_feat, num_grow_ch)

    def forward(self, x):
        out = self.rdb1(x)
        out = self.rdb2(out)
        out = self.rdb3(out)
        return out * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, num_in_ch, num_out_ch, num_feat=64, num_block=23, num_grow_ch=32):
        super().__init__()
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.body = make_layer(RRDB, num_block, num_feat=num_feat, num_grow_ch=num_grow_ch)
        self.conv_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.conv_first(x)
        body_feat = self.conv_body(self.body(feat))
        feat = feat + body_feat
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode='nearest')))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode='nearest')))
        out = self.conv_last(self.lrelu(self.conv_hr(feat)))
        return out


class Upsample(nn.Sequential):
    def __init__(self, scale, num_feat):
        m = []
        for _ in range(int(scale).bit_length() - 1):
            m.append(nn.Conv2d(num_feat, 4 * num_feat, 3, 1, 1))
            m.append(nn.PixelShuffle(2))
        super().__init__(*m)


class MSRResNetTail(nn.Module):
    """SRResNet's residual body and sub-pixel upsampler (BasicSR's MSRResNet)."""

    def __init__(self, num_in_ch=3, num_out_ch=3, num_feat=16, num_block=2, upscale=4):
        super().__init__()
        self.upscale = upscale
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*[nn.Sequential(nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(inplace=True),
                                                  nn.Conv2d(num_feat, num_feat, 3, 1, 1))
                                    for _ in range(num_block)])
        self.upsample = Upsample(upscale, num_feat)
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        default_init_weights([self.conv_first, self.conv_hr, self.conv_last], 0.1)

    def forward(self, x):
        feat = self.lrelu(self.conv_first(x))
        out = feat
        for blk in self.body:
            out = out + blk(out)
        out = self.lrelu(self.upsample(out))
        out = self.conv_last(self.lrelu(self.conv_hr(out)))
        base = F.interpolate(x, scale_factor=self.upscale, mode='bilinear', align_corners=False)
        out += base
        return out


class VGGStyleDiscriminator(nn.Module):
    def __init__(self, num_in_ch, num_feat, input_size=32):
        super().__init__()
        self.conv0_0 = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(num_feat, num_feat, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(num_feat, affine=True)
        self.conv1_0 = nn.Conv2d(num_feat, num_feat * 2, 3, 1, 1, bias=False)
        self.bn1_0 = nn.BatchNorm2d(num_feat * 2, affine=True)
        self.conv1_1 = nn.Conv2d(num_feat * 2, num_feat * 2, 4, 2, 1, bias=False)
        self.bn1_1 = nn.BatchNorm2d(num_feat * 2, affine=True)
        self.linear1 = nn.Linear(num_feat * 2 * (input_size // 4) ** 2, 32)
        self.linear2 = nn.Linear(32, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.lrelu(self.conv0_0(x))
        feat = self.lrelu(self.bn0_1(self.conv0_1(feat)))
        feat = self.lrelu(self.bn1_0(self.conv1_0(feat)))
        feat = self.lrelu(self.bn1_1(self.conv1_1(feat)))
        feat = feat.view(feat.size(0), -1)
        feat = self.lrelu(self.linear1(feat))
        return self.linear2(feat)


class FeatureExtractor(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(inplace=True),
                                      nn.Conv2d(8, 8, 3, 1, 1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                                      nn.Conv2d(8, 16, 3, 1, 1))
        self.register_buffer('mean', torch.Tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer('std', torch.Tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        for p in self.parameters():
            p.requires_grad = False

    def forward(self, x):
        return self.features((x - self.mean) / self.std)


class GANLoss(nn.Module):
    def __init__(self, real_label_val=1.0, fake_label_val=0.0, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight
        self.real_label_val = real_label_val
        self.fake_label_val = fake_label_val
        self.loss = nn.BCEWithLogitsLoss()

    def get_target_label(self, input, target_is_real):
        target_val = (self.real_label_val if target_is_real else self.fake_label_val)
        return input.new_ones(input.size()) * target_val

    def forward(self, input, target_is_real, is_disc=False):
        target_label = self.get_target_label(input, target_is_real)
        loss = self.loss(input, target_label)
        return loss if is_disc else loss * self.loss_weight


net_g = RRDBNet(3, 3, num_feat=16, num_block=2, num_grow_ch=8)
net_d = VGGStyleDiscriminator(3, 8, input_size=32)
net_t = MSRResNetTail()
vgg = FeatureExtractor()
sync(net_g, net_d, net_t, vgg)
g, d, t, feat = comp(net_g), comp(net_d), comp(net_t), comp(vgg)
cri_pix = nn.L1Loss()
cri_gan = GANLoss(loss_weight=5e-3)
optimizer_g = torch.optim.Adam(list(net_g.parameters()) + list(net_t.parameters()), lr=1e-4, betas=(0.9, 0.99))
optimizer_d = torch.optim.Adam(net_d.parameters(), lr=1e-4, betas=(0.9, 0.99))
schedulers = [torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2], gamma=0.5) for o in (optimizer_g, optimizer_d)]
rng = np.random.default_rng(1)


def rand(*shape):
    return torch.from_numpy(rng.random(shape, dtype=np.float32))


LOSSES = []
for current_iter in range(3):
    gt = rand(2, 3, 32, 32)
    lq = F.avg_pool2d(gt, 4) + 0.01 * torch.from_numpy(rng.standard_normal((2, 3, 8, 8), dtype=np.float32))
    for p in net_d.parameters():
        p.requires_grad = False
    optimizer_g.zero_grad()
    output = g(lq)
    out_t = t(lq)
    l_g_pix = cri_pix(output, gt) + cri_pix(out_t, gt)
    l_g_percep = F.l1_loss(feat(output), feat(gt).detach())
    real_d_pred = d(gt).detach()
    fake_g_pred = d(output)
    l_g_real = cri_gan(real_d_pred - torch.mean(fake_g_pred), False, is_disc=False)
    l_g_fake = cri_gan(fake_g_pred - torch.mean(real_d_pred), True, is_disc=False)
    l_g_gan = (l_g_real + l_g_fake) / 2
    l_g_total = l_g_pix + l_g_percep + l_g_gan
    l_g_total.backward()
    optimizer_g.step()
    for p in net_d.parameters():
        p.requires_grad = True
    optimizer_d.zero_grad()
    fake_d_pred = d(output).detach()
    real_d_pred = d(gt)
    l_d_real = cri_gan(real_d_pred - torch.mean(fake_d_pred), True, is_disc=True) * 0.5
    l_d_real.backward()
    fake_d_pred = d(output.detach())
    l_d_fake = cri_gan(fake_d_pred - torch.mean(real_d_pred.detach()), False, is_disc=True) * 0.5
    l_d_fake.backward()
    optimizer_d.step()
    for s in schedulers:
        s.step()
    LOSSES += [l_g_total.item(), l_g_pix.item(), l_d_real.item(), l_d_fake.item()]
net_g.eval(); net_t.eval()
with torch.no_grad():
    sr = g(rand(1, 3, 8, 8))
    LOSSES.append(sr.abs().mean().item())
    LOSSES.append(t(rand(1, 3, 8, 8)).square().mean().item())
