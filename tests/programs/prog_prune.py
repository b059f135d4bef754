from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.nn.utils.prune as prune
torch.manual_seed(0)

# Iterative magnitude pruning with rewinding (the lottery-ticket repos' loop, via
# torch.nn.utils.prune): train, prune 40% of the weights globally by L1 magnitude, rewind
# the survivors to their initial values, train again; finally make the pruning permanent.
class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 12, 3)
        self.fc1 = nn.Linear(12 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)
    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

model = LeNet(); sync(model)
init_state = {k: v.clone() for k, v in model.state_dict().items()}
to_prune = [(model.conv1, "weight"), (model.conv2, "weight"), (model.fc1, "weight"), (model.fc2, "weight")]
rng = np.random.default_rng(0)
data = [(torch.from_numpy(rng.standard_normal((16, 1, 12, 12)).astype(np.float32)),
         torch.from_numpy(rng.integers(0, 10, 16))) for _ in range(3)]
LOSSES = []

def train(net, epochs=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        for x, y in data:
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            LOSSES.append(loss.item())

net = comp(model)
train(net)
for rnd in range(2):
    prune.global_unstructured(to_prune, pruning_method=prune.L1Unstructured, amount=0.4)
    with torch.no_grad():   # rewind the surviving weights to their initial values
        for mname, m in model.named_children():
            m.weight_orig.copy_(init_state[mname + ".weight"])
    train(net)
    zeros = sum(int((getattr(m, name) == 0).sum()) for m, name in to_prune)
    LOSSES.append(zeros / sum(getattr(m, name).numel() for m, name in to_prune))
prune.l1_unstructured(model.fc2, name="bias", amount=3)
for m, name in to_prune + [(model.fc2, "bias")]:
    prune.remove(m, name)
model.eval()
with torch.no_grad():
    out = net(data[0][0])
LOSSES += [out.sum().item(), float(prune.is_pruned(model)), len(list(model.buffers())),
           float((model.fc2.bias == 0).sum())]
