from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# MobileViT-v2 (apple/ml-cvnets' mobilevit_v2 classifier), scaled down: MobileNetV2
# inverted residuals with SiLU, MobileViT blocks that unfold the feature map into patches
# by F.unfold (kernel = stride = patch), run separable (linear) self-attention over the
# patches -- a softmax over the patch axis of a 1-channel query, a context vector, ReLU
# values -- under GroupNorm(1) "layer norms" on 4-D tensors, and fold them back by F.fold;
# ordinary conv/BN init by kaiming_normal_(mode="fan_out"); SGD with nesterov under a
# cosine schedule with linear warmup in a LambdaLR, label smoothing, channels_last inputs


def make_divisible(v, divisor=8, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvLayer(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, groups=1, use_norm=True, use_act=True):
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, (kernel_size - 1) // 2, groups=groups,
                            bias=not use_norm)]
        if use_norm:
            layers.append(nn.BatchNorm2d(out_channels))
        if use_act:
            layers.append(nn.SiLU())
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, in_channels, out_channels, stride, expand_ratio):
        super().__init__()
        hidden_dim = make_divisible(int(round(in_channels * expand_ratio)), 8)
        block = nn.Sequential()
        if expand_ratio != 1:
            block.add_module(name="exp_1x1", module=ConvLayer(in_channels, hidden_dim, 1))
        block.add_module(name="conv_3x3", module=ConvLayer(hidden_dim, hidden_dim, 3, stride, groups=hidden_dim))
        block.add_module(name="red_1x1", module=ConvLayer(hidden_dim, out_channels, 1, use_act=False))
        self.block = block
        self.use_res_connect = stride == 1 and in_channels == out_channels

    def forward(self, x):
        if self.use_res_connect:
            return x + self.block(x)
        return self.block(x)


class LinearSelfAttention(nn.Module):
    def __init__(self, embed_dim, attn_dropout=0.0):
        super().__init__()
        self.qkv_proj = nn.Conv2d(embed_dim, 1 + 2 * embed_dim, 1, bias=True)
        self.attn_dropout = nn.Dropout(p=attn_dropout)
        self.out_proj = nn.Conv2d(embed_dim, embed_dim, 1, bias=True)
        self.embed_dim = embed_dim

    def forward(self, x):
        # x: [B, d, P, N]
        qkv = self.qkv_proj(x)
        query, key, value = torch.split(qkv, split_size_or_sections=[1, self.embed_dim, self.embed_dim], dim=1)
        context_scores = F.softmax(query, dim=-1)
        context_scores = self.attn_dropout(context_scores)
        context_vector = key * context_scores
        context_vector = torch.sum(context_vector, dim=-1, keepdim=True)
        out = F.relu(value) * context_vector.expand_as(value)
        return self.out_proj(out)


class LinearAttnFFN(nn.Module):
    def __init__(self, embed_dim, ffn_latent_dim):
        super().__init__()
        self.pre_norm_attn = nn.Sequential(nn.GroupNorm(1, embed_dim), LinearSelfAttention(embed_dim))
        self.pre_norm_ffn = nn.Sequential(nn.GroupNorm(1, embed_dim), nn.Conv2d(embed_dim, ffn_latent_dim, 1),
                                          nn.SiLU(), nn.Conv2d(ffn_latent_dim, embed_dim, 1))

    def forward(self, x):
        x = x + self.pre_norm_attn(x)
        x = x + self.pre_norm_ffn(x)
        return x


class MobileViTBlockv2(nn.Module):
    def __init__(self, in_channels, attn_unit_dim, n_attn_blocks=2, patch_h=2, patch_w=2):
        super().__init__()
        self.local_rep = nn.Sequential(ConvLayer(in_channels, in_channels, 3, groups=in_channels),
                                       ConvLayer(in_channels, attn_unit_dim, 1, use_norm=False, use_act=False))
        self.global_rep = nn.Sequential(*[LinearAttnFFN(attn_unit_dim, 2 * attn_unit_dim) for _ in range(n_attn_blocks)],
                                        nn.GroupNorm(1, attn_unit_dim))
        self.conv_proj = ConvLayer(attn_unit_dim, in_channels, 1, use_act=False)
        self.patch_h, self.patch_w = patch_h, patch_w
        self.patch_area = patch_h * patch_w

    def unfolding_pytorch(self, feature_map):
        batch_size, in_channels, img_h, img_w = feature_map.shape
        patches = F.unfold(feature_map, kernel_size=(self.patch_h, self.patch_w), stride=(self.patch_h, self.patch_w))
        patches = patches.reshape(batch_size, in_channels, self.patch_h * self.patch_w, -1)
        return patches, (img_h, img_w)

    def folding_pytorch(self, patches, output_size):
        batch_size, in_dim, patch_size, n_patches = patches.shape
        patches = patches.reshape(batch_size, in_dim * patch_size, n_patches)
        return F.fold(patches, output_size=output_size, kernel_size=(self.patch_h, self.patch_w),
                      stride=(self.patch_h, self.patch_w))

    def resize_input_if_needed(self, x):
        batch_size, in_channels, orig_h, orig_w = x.shape
        if orig_h % self.patch_h != 0 or orig_w % self.patch_w != 0:
            new_h = int(math.ceil(orig_h / self.patch_h) * self.patch_h)
            new_w = int(math.ceil(orig_w / self.patch_w) * self.patch_w)
            x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=True)
        return x

    def forward(self, x):
        x = self.resize_input_if_needed(x)
        fm = self.local_rep(x)
        patches, output_size = self.unfolding_pytorch(fm)
        patches = self.global_rep(patches)
        fm = self.folding_pytorch(patches=patches, output_size=output_size)
        return self.conv_proj(fm)


class MobileViTv2(nn.Module):
    def __init__(self, num_classes=5, width_multiplier=0.25):
        super().__init__()
        ch = lambda c: make_divisible(c * width_multiplier, 8)
        self.conv_1 = ConvLayer(3, ch(32), 3, stride=2)
        self.layer_1 = InvertedResidual(ch(32), ch(64), 1, 2)
        self.layer_2 = nn.Sequential(InvertedResidual(ch(64), ch(128), 2, 2), InvertedResidual(ch(128), ch(128), 1, 2))
        self.layer_3 = nn.Sequential(InvertedResidual(ch(128), ch(256), 2, 2), MobileViTBlockv2(ch(256), ch(128), 1))
        self.layer_4 = nn.Sequential(InvertedResidual(ch(256), ch(384), 2, 2), MobileViTBlockv2(ch(384), ch(192), 2))
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ch(384), num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.layer_1(self.conv_1(x))
        x = self.layer_4(self.layer_3(self.layer_2(x)))
        return self.classifier(x)


rng = np.random.default_rng(0)
net = MobileViTv2(); sync(net)
model = comp(net)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=4e-5)
warmup, total = 2, 4
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda e: (e + 1) / warmup if e < warmup else 0.5 * (1 + math.cos(math.pi * (e - warmup) / (total - warmup))))
LOSSES = []
for step in range(total):
    images = torch.from_numpy(rng.standard_normal((4, 3, 32, 32)).astype(np.float32))
    images = images.contiguous(memory_format=torch.channels_last)
    target = torch.from_numpy(rng.integers(0, 5, 4))
    output = model(images)
    loss = criterion(output, target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES.append(loss.item())
net.eval()
with torch.no_grad():
    out = model(torch.from_numpy(rng.standard_normal((2, 3, 40, 40)).astype(np.float32)))
    LOSSES += out.flatten().tolist()
