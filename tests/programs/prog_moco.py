from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# MoCo v2 as its repository writes it: a query encoder and a momentum (key) encoder updated
# as param_k = m * param_k + (1 - m) * param_q under no_grad, a queue of negatives kept as a
# buffer and filled at a moving pointer, logits by einsum over normalized embeddings / T,
# cross-entropy against label 0 (the positive); the whole MoCo module compiled (its
# pointer, read by int(), takes the values 0, 16, 32: one capture each)
def encoder(dim=16):
    return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, dim))   # the v2 MLP head
class MoCo(nn.Module):
    def __init__(self, dim=16, K=48, m=0.99, T=0.2):
        super(MoCo, self).__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = encoder(dim)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for param_k in self.encoder_k.parameters():
            param_k.requires_grad = False  # not update by gradient
        self.register_buffer("queue", torch.randn(dim, K))
        self.queue = nn.functional.normalize(self.queue, dim=0)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)
    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0  # for simplicity
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K  # move pointer
        self.queue_ptr[0] = ptr
    def forward(self, im_q, im_k):
        q = nn.functional.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = nn.functional.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels
model = MoCo(); sync(model)
net = comp(model)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), 0.03, momentum=0.9, weight_decay=1e-4)
r = np.random.default_rng(0)
def augment(x):   # random crops by flips and noise, drawn with numpy
    x = x[:, :, :, ::-1] if r.random() < 0.5 else x
    return torch.from_numpy(np.ascontiguousarray(x + 0.1 * r.standard_normal(x.shape)).astype(np.float32))
LOSSES = []
for step in range(5):
    images = r.random((16, 3, 16, 16))
    output, target = net(augment(images), augment(images))
    loss = criterion(output, target)
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    LOSSES.append(loss.item()); LOSSES.append((output.argmax(1) == target).float().mean().item())
LOSSES += [model.queue.sum().item(), int(model.queue_ptr), model.encoder_k[0].weight.sum().item(),
           model.encoder_k[1].running_var.sum().item()]
