"""The PyTorch spatial transformer tutorial's network, run by changing only the imports.

A localization network (conv, max-pool, ReLU, linear) predicts a 2x3 affine transform per
image, initialized to the identity; ``F.affine_grid`` and ``F.grid_sample`` warp the input
with it before the classifier (conv, Dropout2d, max-pool, linear, log_softmax, NLL loss,
SGD). The 28x28 "digits" are random (no download): the program shows the port runs and
trains, gradients reaching the transform through the sampler.

Run:  python examples/spatial_transformer.py [--steps N] [--batch B]
"""
import argparse
import time

import tracejit as torch
import tracejit.nn as nn
import tracejit.nn.functional as F
import tracejit.optim as optim


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch, 1, 28, 28)
    target = torch.randint(0, 10, (args.batch,))
    model.train()
    losses = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        print(f"step {i}: loss {losses[-1]:.4f} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
    return model, losses


if __name__ == "__main__":
    main()
