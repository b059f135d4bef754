from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import os, tempfile, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
torch.manual_seed(0)
# a training script's bookkeeping around a small residual CNN: forward hooks collecting
# activations by layer name (a feature extractor), a backward hook on the head, activation
# checkpointing (checkpoint_sequential over the trunk, checkpoint on a block), and
# torch.save / torch.load of model, optimizer and scheduler mid-training, the resumed run
# matching the uninterrupted one bit for bit
class BasicBlock(nn.Module):
    expansion = 1
    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))
    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out
class Net(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 8))
        self.layer2 = BasicBlock(8, 16, stride=2)
        self.fc = nn.Linear(16, num_classes)
    def forward(self, x):
        out = self.stem(x)
        out = checkpoint_sequential(self.layer1, 2, out, use_reentrant=False)
        out = checkpoint(self.layer2, out, use_reentrant=False)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)
activation = {}
def get_activation(name):
    def hook(model, input, output):
        activation[name] = output.detach()
    return hook
grad_norms = []
def make(sync_weights=True):
    net = Net()
    if sync_weights:
        sync(net)
    net.layer1[1].register_forward_hook(get_activation("layer1.1"))
    net.layer2.register_forward_hook(get_activation("layer2"))
    net.fc.register_full_backward_hook(lambda m, gin, gout: grad_norms.append(gout[0].norm().item()))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return net, opt, sched
r = np.random.default_rng(0)
batches = [(torch.from_numpy(r.standard_normal((4, 3, 8, 8)).astype(np.float32)),
            torch.from_numpy(r.integers(0, 5, 4))) for _ in range(5)]
criterion = nn.CrossEntropyLoss()
def train(net, fwd, opt, sched, steps):
    losses = []
    net.train()
    for x, y in steps:
        opt.zero_grad()
        loss = criterion(fwd(x), y)
        loss.backward()
        opt.step(); sched.step()
        losses.append(loss.item())
    return losses
net, opt, sched = make()
fwd = comp(net)
LOSSES = train(net, fwd, opt, sched, batches[:3])
LOSSES += [activation["layer1.1"].mean().item(), activation["layer2"].abs().sum().item()]
path = os.path.join(tempfile.mkdtemp(), "checkpoint.pth")
torch.save({"epoch": 3, "model_state_dict": net.state_dict(), "optimizer_state_dict": opt.state_dict(),
            "scheduler_state_dict": sched.state_dict(), "loss": LOSSES[2]}, path)
straight = train(net, fwd, opt, sched, batches[3:])
# a fresh process's view: new objects, state from the file
net2, opt2, sched2 = make(sync_weights=False)
ckpt = torch.load(path)
net2.load_state_dict(ckpt["model_state_dict"])
opt2.load_state_dict(ckpt["optimizer_state_dict"])
sched2.load_state_dict(ckpt["scheduler_state_dict"])
assert ckpt["epoch"] == 3 and ckpt["loss"] == LOSSES[2]
assert sched2.get_last_lr() == [0.025] and opt2.param_groups[0]["lr"] == 0.025
resumed = train(net2, comp(net2), opt2, sched2, batches[3:])
assert resumed == straight, (resumed, straight)
LOSSES += straight + [activation["layer2"].mean().item(), float(len(grad_norms))] + grad_norms
net2.eval()
with torch.no_grad():
    LOSSES.append(net2(batches[0][0]).sum().item())
