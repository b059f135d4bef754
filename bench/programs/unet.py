"""A U-Net for two-class segmentation, as milesial/Pytorch-UNet writes it.

``DoubleConv`` (3x3 Conv2d without bias, BatchNorm2d, ReLU in place, twice), four
``Down`` steps (MaxPool2d then DoubleConv), four ``Up`` steps (ConvTranspose2d, ``F.pad``
to the skip's size, ``torch.cat`` with it, DoubleConv), a 1x1 output conv; the repository's
loss, cross-entropy plus the Dice loss of the softmax against ``F.one_hot`` of the mask;
RMSprop with momentum, ``clip_grad_norm_``. Widths 8 to 128, 64x64 images, batch 4.
Compiled: the network.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "unet"
CHANNELS, CLASSES, SIZE, BATCH = 3, 2, 64, 4


class DoubleConv(nn.Module):
    """(convolution => [BN] => ReLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes):
        super().__init__()
        self.inc = DoubleConv(n_channels, 8)
        self.down1 = Down(8, 16)
        self.down2 = Down(16, 32)
        self.down3 = Down(32, 64)
        self.down4 = Down(64, 128)
        self.up1 = Up(128, 64)
        self.up2 = Up(64, 32)
        self.up3 = Up(32, 16)
        self.up4 = Up(16, 8)
        self.outc = nn.Conv2d(8, n_classes, kernel_size=1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)


def dice_coeff(input, target, epsilon=1e-6):
    sum_dim = (-1, -2, -3)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    dice = (inter + epsilon) / (sets_sum + epsilon)
    return dice.mean()


def dice_loss(input, target):
    return 1 - dice_coeff(input.flatten(0, 1), target.flatten(0, 1))


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.batches = [(torch.from_numpy(r.random((BATCH, CHANNELS, SIZE, SIZE), dtype="float32")),
                         torch.from_numpy(r.integers(0, CLASSES, (BATCH, SIZE, SIZE))))
                        for _ in range(4)]
        self.model = UNet(CHANNELS, CLASSES)
        load_params(NAME, self.model)
        self.optimizer = torch.optim.RMSprop(self.model.parameters(), lr=1e-5, weight_decay=1e-8,
                                             momentum=0.999, foreach=True)
        self.criterion = nn.CrossEntropyLoss()
        self.forward = compile(self.model)
        self.i = 0

    def step(self) -> float:
        images, true_masks = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.model.train()
        masks_pred = self.forward(images)
        loss = self.criterion(masks_pred, true_masks)
        loss += dice_loss(F.softmax(masks_pred, dim=1).float(),
                          F.one_hot(true_masks, CLASSES).permute(0, 3, 1, 2).float())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss.item()
