from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# Prototypical networks (Snell et al. 2017), the few-shot repos' episode loop: a Conv-4
# backbone embeds support and query images together, class prototypes are support means,
# logits are negative squared distances. Episodes vary in ways and shots (5-way 1-shot,
# 3-way 2-shot ...), so the backbone sees several batch sizes: compiled with dynamic=True.
def conv_block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))

class ProtoNet(nn.Module):
    def __init__(self, hid=16):
        super().__init__()
        self.encoder = nn.Sequential(conv_block(1, hid), conv_block(hid, hid), conv_block(hid, hid), nn.Flatten())
    def forward(self, x):
        return self.encoder(x)

def euclidean_dist(x, y):
    n, m, d = x.size(0), y.size(0), x.size(1)
    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)
    return torch.pow(x - y, 2).sum(2)

def episode_loss(embed, support, query, n_way, n_shot, n_query):
    z = embed(torch.cat([support.view(n_way * n_shot, *support.size()[2:]),
                         query.view(n_way * n_query, *query.size()[2:])], 0))
    z_proto = z[:n_way * n_shot].view(n_way, n_shot, -1).mean(1)
    zq = z[n_way * n_shot:]
    log_p_y = F.log_softmax(-euclidean_dist(zq, z_proto), dim=1).view(n_way, n_query, -1)
    target = torch.arange(0, n_way).view(n_way, 1, 1).expand(n_way, n_query, 1).long()
    loss = -log_p_y.gather(2, target).squeeze().view(-1).mean()
    _, y_hat = log_p_y.max(2)
    acc = torch.eq(y_hat, target.squeeze()).float().mean()
    return loss, acc

rng = np.random.default_rng(0)
protos = rng.standard_normal((20, 1, 16, 16)).astype(np.float32)
def sample_episode(n_way, n_shot, n_query):
    classes = rng.choice(20, n_way, replace=False)
    imgs = 0.3 * protos[classes][:, None] + rng.standard_normal((n_way, n_shot + n_query, 1, 16, 16)).astype(np.float32)
    x = torch.from_numpy(imgs)
    return x[:, :n_shot].contiguous(), x[:, n_shot:].contiguous()

model = ProtoNet(); sync(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
embed = comp(model, dynamic=True)
LOSSES = []
for ep, (w, s, q) in enumerate([(5, 1, 3), (3, 2, 3), (5, 1, 3), (4, 3, 2), (3, 2, 3)]):
    model.train()
    support, query = sample_episode(w, s, q)
    loss, acc = episode_loss(embed, support, query, w, s, q)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES += [loss.item(), acc.item()]
model.eval()
with torch.no_grad():
    for w, s, q in [(5, 5, 4), (2, 1, 6)]:
        loss, acc = episode_loss(embed, *sample_episode(w, s, q), w, s, q)
        LOSSES += [loss.item(), acc.item()]
