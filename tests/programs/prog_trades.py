from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F, torch.optim as optim
from torch.autograd import Variable
torch.manual_seed(0)
# Adversarial training as TRADES' trades.py and Madry's PGD write it: the model switched to
# eval() to craft x_adv by steps of sign(torch.autograd.grad(...)) projected by torch.min /
# torch.max onto the eps-ball and clamped to [0, 1], the KL term by the deprecated
# nn.KLDivLoss(size_average=False), Variable wrappers, then "fast is better than free" FGSM
# with a random start, per-channel tensor bounds and delta.grad read after backward; the
# evaluation attacks with PGD under a MultiStepLR-scheduled SGD; noise drawn with numpy
class SmallCNN(nn.Module):
    def __init__(self, drop=0.5):
        super(SmallCNN, self).__init__()
        self.num_channels = 1
        self.num_labels = 5
        self.feature_extractor = nn.Sequential(
            nn.Conv2d(self.num_channels, 8, 3), nn.ReLU(),
            nn.Conv2d(8, 8, 3), nn.Mish(),
            nn.MaxPool2d(2, 2))
        self.classifier = nn.Sequential(
            nn.Linear(8 * 3 * 3, 32), nn.ReLU(), nn.Dropout(drop),
            nn.Linear(32, self.num_labels))
        for m in self.modules():
            if isinstance(m, (nn.Conv2d)):
                nn.init.kaiming_normal_(m.weight)
                if m.bias is not None:
                    m.bias.data.zero_()
        nn.init.constant_(self.classifier[-1].weight, 0)
        nn.init.constant_(self.classifier[-1].bias, 0)
    def forward(self, input):
        features = self.feature_extractor(input)
        logits = self.classifier(features.view(-1, 8 * 3 * 3))
        return logits
def trades_loss(model, x_natural, y, optimizer, noise, step_size=0.003, epsilon=0.031,
                perturb_steps=3, beta=1.0):
    # define KL-loss
    criterion_kl = nn.KLDivLoss(size_average=False)
    model.eval()
    batch_size = len(x_natural)
    # generate adversarial example
    x_adv = x_natural.detach() + 0.001 * noise.detach()
    for _ in range(perturb_steps):
        x_adv.requires_grad_()
        with torch.enable_grad():
            loss_kl = criterion_kl(F.log_softmax(model(x_adv), dim=1),
                                   F.softmax(model(x_natural), dim=1))
        grad = torch.autograd.grad(loss_kl, [x_adv])[0]
        x_adv = x_adv.detach() + step_size * torch.sign(grad.detach())
        x_adv = torch.min(torch.max(x_adv, x_natural - epsilon), x_natural + epsilon)
        x_adv = torch.clamp(x_adv, 0.0, 1.0)
    model.train()
    x_adv = Variable(torch.clamp(x_adv, 0.0, 1.0), requires_grad=False)
    # zero gradient
    optimizer.zero_grad()
    # calculate robust loss
    logits = model(x_natural)
    loss_natural = F.cross_entropy(logits, y)
    loss_robust = (1.0 / batch_size) * criterion_kl(F.log_softmax(model(x_adv), dim=1),
                                                    F.softmax(model(x_natural), dim=1))
    loss = loss_natural + beta * loss_robust
    return loss
def clamp(X, lower_limit, upper_limit):
    return torch.max(torch.min(X, upper_limit), lower_limit)
def pgd_whitebox(model, X, y, epsilon=0.031, num_steps=3, step_size=0.01, random=None):
    out = model(X)
    err = (out.data.max(1)[1] != y.data).float().sum()
    X_pgd = Variable(X.data, requires_grad=True)
    if random is not None:
        X_pgd = Variable(X_pgd.data + random, requires_grad=True)
    for _ in range(num_steps):
        opt = optim.SGD([X_pgd], lr=1e-3)
        opt.zero_grad()
        with torch.enable_grad():
            loss = nn.CrossEntropyLoss()(model(X_pgd), y)
        loss.backward()
        eta = step_size * X_pgd.grad.data.sign()
        X_pgd = Variable(X_pgd.data + eta, requires_grad=True)
        eta = torch.clamp(X_pgd.data - X.data, -epsilon, epsilon)
        X_pgd = Variable(X.data + eta, requires_grad=True)
        X_pgd = Variable(torch.clamp(X_pgd, 0, 1.0), requires_grad=True)
    err_pgd = (model(X_pgd).data.max(1)[1] != y.data).float().sum()
    return err, err_pgd
rng = np.random.default_rng(0)
data = torch.from_numpy(rng.uniform(0, 1, (16, 1, 10, 10)).astype(np.float32))
target = torch.from_numpy(rng.integers(0, 5, 16))
net = SmallCNN(drop=0.0)   # (dropout draws from torch's stream)
sync(net)
model = comp(net, dynamic=True)
optimizer = optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1], gamma=0.1)
LOSSES = []
for epoch in range(2):
    model.train()
    x, y = data[8 * epoch:8 * epoch + 8], target[8 * epoch:8 * epoch + 8]
    noise = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
    loss = trades_loss(model=model, x_natural=x, y=y, optimizer=optimizer, noise=noise)
    loss.backward()
    optimizer.step()
    scheduler.step()
    LOSSES += [loss.item(), optimizer.param_groups[0]["lr"]]
# fast FGSM training: a random start in the eps-ball, per-channel limits as tensors
mu, std = torch.tensor([0.5]).view(1, 1, 1), torch.tensor([0.25]).view(1, 1, 1)
upper_limit, lower_limit = ((1 - mu) / std), ((0 - mu) / std)
epsilon, alpha = (8 / 255.) / std, (10 / 255.) / std
X, y = (data[:8] - mu) / std, target[:8]
delta = torch.zeros_like(X)
for j in range(len(epsilon)):
    delta[:, j, :, :] = torch.from_numpy(rng.uniform(-1, 1, delta[:, j].shape).astype(np.float32)) \
        * epsilon[j][0][0].item()
delta.data = clamp(delta, lower_limit - X, upper_limit - X)
delta.requires_grad = True
output = model(X + delta[:X.size(0)])
loss = F.cross_entropy(output, y)
loss.backward()
grad = delta.grad.detach()
delta.data = clamp(delta + alpha * torch.sign(grad), -epsilon, epsilon)
delta.data[:X.size(0)] = clamp(delta[:X.size(0)], lower_limit - X, upper_limit - X)
delta = delta.detach()
output = model(X + delta[:X.size(0)])
loss = F.cross_entropy(output, y)
optimizer.zero_grad()
loss.backward()
optimizer.step()
LOSSES += [loss.item(), delta.abs().sum().item()]
model.eval()
random = torch.from_numpy(rng.uniform(-0.031, 0.031, data.shape).astype(np.float32))
err, err_pgd = pgd_whitebox(model, data, target, random=random)
LOSSES += [err.item(), err_pgd.item()]
with torch.no_grad():
    LOSSES.append(F.cross_entropy(model(data), target).item())
