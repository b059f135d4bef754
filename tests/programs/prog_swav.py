from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.optim as optim
torch.manual_seed(0)
# SwAV and Barlow Twins as their repositories write them. SwAV: prototypes an nn.Linear
# without bias whose rows are normalized in place before each step (weight.data.clone(),
# F.normalize, copy_), codes by Sinkhorn-Knopp under no_grad (Q = exp(scores / eps).t(),
# Q /= sum, alternating row and column normalizations), a queue of past embeddings shifted
# by slice assignment and used once full (torch.all(queue[i, -1, :] == 0)), swapped
# prediction over the crops (np.delete of the assigned crop), the prototypes' gradients
# cancelled for the first iterations. Barlow Twins: the cross-correlation of two batch-normed
# (affine=False) projections divided in place, its diagonal pulled to 1 in place on a view
# (torch.diagonal(c).add_(-1).pow_(2)), the off-diagonal by flatten()[:-1].view(n-1, n+1)[:, 1:],
# trained by the repository's LARS optimizer (an optim.Optimizer subclass, trust ratio by
# nested torch.where, biases and norms filtered by p.ndim == 1)
def backbone():
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
class SwAVModel(nn.Module):
    def __init__(self, output_dim=16, hidden_mlp=32, nmb_prototypes=20):
        super().__init__()
        self.backbone = backbone()
        self.projection_head = nn.Sequential(nn.Linear(16, hidden_mlp), nn.BatchNorm1d(hidden_mlp),
                                             nn.ReLU(inplace=True), nn.Linear(hidden_mlp, output_dim))
        self.l2norm = True
        self.prototypes = nn.Linear(output_dim, nmb_prototypes, bias=False)
    def forward_head(self, x):
        x = self.projection_head(x)
        if self.l2norm:
            x = nn.functional.normalize(x, dim=1, p=2)
        return x, self.prototypes(x)
    def forward(self, inputs):
        if not isinstance(inputs, list):
            inputs = [inputs]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in inputs]), return_counts=True)[1], 0)
        start_idx = 0
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(inputs[start_idx: end_idx]))
            if start_idx == 0:
                output = _out
            else:
                output = torch.cat((output, _out))
            start_idx = end_idx
        return self.forward_head(output)
epsilon, sinkhorn_iterations, temperature = 0.05, 3, 0.1
nmb_crops, crops_for_assign, freeze_prototypes_niters = [2, 2], [0, 1], 2
@torch.no_grad()
def distributed_sinkhorn(out):
    Q = torch.exp(out / epsilon).t()   # Q is K-by-B for consistency with notations from our paper
    B = Q.shape[1]   # number of samples to assign
    K = Q.shape[0]   # how many prototypes
    # make the matrix sums to 1
    sum_Q = torch.sum(Q)
    Q /= sum_Q
    for it in range(sinkhorn_iterations):
        # normalize each row: total weight per prototype must be 1/K
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        Q /= sum_of_rows
        Q /= K
        # normalize each column: total weight per sample must be 1/B
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B
    Q *= B   # the colomns must sum to 1 so that Q is an assignment
    return Q.t()
model = SwAVModel(); sync(model)
net, sinkhorn = comp(model), comp(distributed_sinkhorn)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-6)
bs, queue_length = 8, 16
queue = torch.zeros(len(crops_for_assign), queue_length, 16)
use_the_queue = False
r = np.random.default_rng(0)
def view(images, size):
    s = int(r.integers(size, 17)); i, j = r.integers(0, 17 - s, size=2)
    c = F.interpolate(images[:, :, i:i + s, j:j + s], size=(size, size), mode='bilinear', align_corners=False)
    return c + 0.05 * torch.from_numpy(r.standard_normal(c.shape).astype(np.float32))
LOSSES = []
for iteration in range(5):
    images = torch.from_numpy(r.random((bs, 3, 16, 16)).astype(np.float32))
    inputs = [view(images, 16) for _ in range(nmb_crops[0])] + [view(images, 8) for _ in range(nmb_crops[1])]
    # normalize the prototypes
    with torch.no_grad():
        w = model.prototypes.weight.data.clone()
        w = nn.functional.normalize(w, dim=1, p=2)
        model.prototypes.weight.copy_(w)
    embedding, output = net(inputs)
    embedding = embedding.detach()
    loss = 0
    for i, crop_id in enumerate(crops_for_assign):
        with torch.no_grad():
            out = output[bs * crop_id: bs * (crop_id + 1)].detach()
            # time to use the queue
            if queue is not None:
                if use_the_queue or not torch.all(queue[i, -1, :] == 0):
                    use_the_queue = True
                    out = torch.cat((torch.mm(queue[i], model.prototypes.weight.t()), out))
                # fill the queue
                queue[i, bs:] = queue[i, :-bs].clone()
                queue[i, :bs] = embedding[crop_id * bs: (crop_id + 1) * bs]
            # get assignments
            q = sinkhorn(out)[-bs:]
        # cluster assignment prediction
        subloss = 0
        for v in np.delete(np.arange(np.sum(nmb_crops)), crop_id):
            x = output[bs * v: bs * (v + 1)] / temperature
            subloss -= torch.mean(torch.sum(q * F.log_softmax(x, dim=1), dim=1))
        loss += subloss / (np.sum(nmb_crops) - 1)
    loss /= len(crops_for_assign)
    optimizer.zero_grad()
    loss.backward()
    # cancel gradients for the prototypes
    if iteration < freeze_prototypes_niters:
        for name, p in model.named_parameters():
            if "prototypes" in name:
                p.grad = None
    optimizer.step()
    LOSSES.append(loss.item()); LOSSES.append(float(use_the_queue))
LOSSES += [queue.sum().item(), model.prototypes.weight.norm(dim=1).mean().item()]

def off_diagonal(x):
    # return a flattened view of the off-diagonal elements of a square matrix
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()
class BarlowTwins(nn.Module):
    def __init__(self, batch_size, lambd=0.0051, sizes=(16, 32, 32)):
        super().__init__()
        self.batch_size, self.lambd = batch_size, lambd
        self.backbone = backbone()
        layers = []
        for i in range(len(sizes) - 2):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=False))
            layers.append(nn.BatchNorm1d(sizes[i + 1]))
            layers.append(nn.ReLU(inplace=True))
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)
        # normalization layer for the representations z1 and z2
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)
    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))
        # empirical cross-correlation matrix
        c = self.bn(z1).T @ self.bn(z2)
        # sum the cross-correlation matrix between all gpus
        c.div_(self.batch_size)
        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        loss = on_diag + self.lambd * off_diag
        return loss
class LARS(optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=None, lars_adaptation_filter=None):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
                        weight_decay_filter=weight_decay_filter, lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)
    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad
                if dp is None:
                    continue
                if g['weight_decay_filter'] is None or not g['weight_decay_filter'](p):
                    dp = dp.add(p, alpha=g['weight_decay'])
                if g['lars_adaptation_filter'] is None or not g['lars_adaptation_filter'](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0, (g['eta'] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)
                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)
                p.add_(mu, alpha=-g['lr'])
def exclude_bias_and_norm(p):
    return p.ndim == 1
bt = BarlowTwins(batch_size=8); sync(bt)
bt_c = comp(bt)
param_weights, param_biases = [], []
for param in bt.parameters():
    if param.ndim == 1:
        param_biases.append(param)
    else:
        param_weights.append(param)
parameters = [{'params': param_weights}, {'params': param_biases}]
lars = LARS(parameters, lr=0, weight_decay=1e-6, weight_decay_filter=exclude_bias_and_norm,
            lars_adaptation_filter=exclude_bias_and_norm)
for step in range(5):
    lars.param_groups[0]['lr'] = 0.2 * (step + 1) / 5   # the repository's linear warmup
    lars.param_groups[1]['lr'] = 0.0048 * (step + 1) / 5
    images = torch.from_numpy(r.random((8, 3, 16, 16)).astype(np.float32))
    y1, y2 = view(images, 16), torch.flip(view(images, 16), dims=[3])
    loss = bt_c(y1, y2)
    lars.zero_grad()
    loss.backward()
    lars.step()
    LOSSES.append(loss.item())
LOSSES += [bt.bn.running_var.sum().item(), bt.projector[0].weight.sum().item()]
