from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class HyperNetwork(nn.Module):
    """Ha et al. (2016)'s static hypernetwork: a layer embedding z_j is mapped to the
    (out, in, k, k) kernel of layer j, in two linear steps."""
    def __init__(self, f_size=3, z_dim=8, out_size=4, in_size=4):
        super().__init__()
        self.z_dim, self.f_size, self.out_size, self.in_size = z_dim, f_size, out_size, in_size
        self.w1 = nn.Parameter(torch.fmod(torch.randn((z_dim, out_size * f_size * f_size)), 2))
        self.b1 = nn.Parameter(torch.fmod(torch.randn((out_size * f_size * f_size)), 2))
        self.w2 = nn.Parameter(torch.fmod(torch.randn((z_dim, in_size * z_dim)), 2))
        self.b2 = nn.Parameter(torch.fmod(torch.randn((in_size * z_dim)), 2))
    def forward(self, z):
        h_in = torch.matmul(z, self.w2) + self.b2
        h_in = h_in.view(self.in_size, self.z_dim)
        h_final = torch.matmul(h_in, self.w1) + self.b1
        return h_final.view(self.out_size, self.in_size, self.f_size, self.f_size)
class Embedding(nn.Module):
    """A (z_num[0] x z_num[1]) grid of layer embeddings, each giving a 4x4 block of the kernel."""
    def __init__(self, z_num, z_dim):
        super().__init__()
        self.z_list = nn.ParameterList()
        self.z_num = z_num
        for i in range(z_num[0] * z_num[1]):
            self.z_list.append(nn.Parameter(torch.fmod(torch.randn(z_dim), 2)))
    def forward(self, hyper_net):
        ww = []
        h, k = self.z_num
        for i in range(h):
            w = []
            for j in range(k):
                w.append(hyper_net(self.z_list[i * k + j]))
            ww.append(torch.cat(w, dim=1))
        return torch.cat(ww, dim=0)
class PrimaryNetwork(nn.Module):
    def __init__(self, z_dim=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.hope = HyperNetwork(z_dim=z_dim)
        self.zs_size = [[1, 1], [2, 1], [2, 2]]
        self.zs = nn.ModuleList([Embedding(s, z_dim) for s in self.zs_size])
        self.bns = nn.ModuleList([nn.BatchNorm2d(4 * s[0]) for s in self.zs_size])
        self.final = nn.Linear(8, 5)
    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        for i, (emb, bn) in enumerate(zip(self.zs, self.bns)):
            w = emb(self.hope)                                 # (4 * z_h, 4 * z_w, 3, 3)
            x = F.relu(bn(F.conv2d(x, w, padding=1, stride=2 if i == 1 else 1)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.final(x)
class TaskHyperMLP(nn.Module):
    """A task-conditioned hypernetwork (continual-learning style): a task embedding gives
    all weights of a small target MLP, applied with F.linear."""
    def __init__(self, n_tasks=3, emb=6, sizes=(2, 8, 1)):
        super().__init__()
        self.task_emb = nn.Embedding(n_tasks, emb)
        self.shapes = [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]
        n = sum(o * i + o for o, i in self.shapes)
        self.gen = nn.Sequential(nn.Linear(emb, 16), nn.ELU(), nn.Linear(16, n))
    def forward(self, task, x):
        flat = self.gen(self.task_emb(task))
        out, k = x, 0
        for li, (o, i) in enumerate(self.shapes):
            W = flat[k:k + o * i].view(o, i); k += o * i
            b = flat[k:k + o]; k += o
            out = F.linear(out, W, b)
            if li < len(self.shapes) - 1:
                out = torch.sigmoid(out)
        return out
net, task_net = PrimaryNetwork(), TaskHyperMLP(); sync(net, task_net)
optimizer = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
task_opt = torch.optim.RMSprop(task_net.parameters(), lr=0.01)
fwd, task_fwd = comp(net), comp(task_net)
r = np.random.default_rng(0)
LOSSES = []
for step in range(3):
    inputs = torch.from_numpy(r.standard_normal((4, 3, 8, 8)).astype(np.float32))
    labels = torch.from_numpy(r.integers(0, 5, 4))
    optimizer.zero_grad()
    loss = F.cross_entropy(fwd(inputs), labels)
    loss.backward()
    optimizer.step()
    LOSSES.append(loss.item())
    for task in range(3):
        x = torch.from_numpy(r.standard_normal((6, 2)).astype(np.float32))
        y = torch.sin(x.sum(1, keepdim=True) * (task + 1))
        task_opt.zero_grad()
        l2 = F.mse_loss(task_fwd(torch.tensor(task), x), y)
        l2.backward()
        task_opt.step()
        LOSSES.append(l2.item())
net.eval()
with torch.no_grad():
    LOSSES += fwd(inputs)[0].tolist()
