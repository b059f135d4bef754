from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.optim as optim
torch.manual_seed(0)
# the spatial transformer tutorial's network on 28x28 digits: a localization net regresses
# an affine theta (initialized to the identity), affine_grid + grid_sample warp the input
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d(p=0.0)
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
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)
        return x
    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=False)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)
model = Net(); sync(model)
# the loc head starts at the identity; nudge it so the warp is not a plain copy
with torch.no_grad():
    model.fc_loc[2].bias.add_(torch.tensor([0.1, -0.2, 0.05, 0.15, -0.1, -0.05]))
net = comp(model, mode="reduce-overhead")
optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
r = np.random.default_rng(0)
LOSSES = []
for step in range(4):
    data = torch.from_numpy(r.random((16, 1, 28, 28), dtype=np.float32))
    target = torch.from_numpy(r.integers(0, 10, 16))
    model.train()
    optimizer.zero_grad()
    output = net(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
with torch.no_grad():
    model.eval()
    data = torch.from_numpy(r.random((8, 1, 28, 28), dtype=np.float32))
    warped = model.stn(data)
    LOSSES.append(warped.sum().item()); LOSSES.append(net(data).argmax(1).float().sum().item())
    # a rotation by 30 degrees, border padding and bilinear/nearest modes
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    theta = torch.tensor([[c, -s, 0.1], [s, c, 0.0]], dtype=torch.float32).unsqueeze(0).repeat(8, 1, 1)
    grid = F.affine_grid(theta, data.size(), align_corners=True)
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            LOSSES.append(F.grid_sample(data, grid, mode=mode, padding_mode=pad, align_corners=True).sum().item())
