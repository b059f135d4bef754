from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
torch.manual_seed(0)

# LoRA fine-tuning (Hu et al. 2021) the minLoRA way: a parametrization adds B @ A to the
# frozen weight; only the adapters train; at the end they are merged into the weights.
class LoRAParametrization(nn.Module):
    def __init__(self, fan_in, fan_out, rank=4, alpha=8):
        super().__init__()
        self.lora_A = nn.Parameter(torch.zeros(rank, fan_in))
        self.lora_B = nn.Parameter(torch.zeros(fan_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / rank
        self.enabled = True
    def forward(self, W):
        if not self.enabled:
            return W
        return W + (self.lora_B @ self.lora_A).view(W.shape) * self.scale

def add_lora(model, rank=4):
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and "head" not in name:
            fan_out, fan_in = m.weight.shape
            parametrize.register_parametrization(m, "weight", LoRAParametrization(fan_in, fan_out, rank))

class Block(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(self, x, pad):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
        att = att.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

class Classifier(nn.Module):
    def __init__(self, vocab=50, d=32, n_cls=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, 16, d) * 0.02)
        self.blocks = nn.ModuleList([Block(d) for _ in range(2)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_cls)
    def forward(self, ids):
        pad = ids == 0
        x = self.tok(ids) + self.pos[:, :ids.size(1)]
        for b in self.blocks:
            x = b(x, pad)
        x = self.ln(x)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((x * keep).sum(1) / keep.sum(1))

model = Classifier(); sync(model)          # the "pretrained" model
add_lora(model)
for n, p in model.named_parameters():
    p.requires_grad = "lora_" in n or n.startswith("head")
sync(model)                                   # the adapters' draws too
trainable = [p for p in model.parameters() if p.requires_grad]
n_train = sum(p.numel() for p in trainable)
opt = torch.optim.AdamW([{"params": [p for n, p in model.named_parameters() if "lora_" in n], "weight_decay": 0.0},
                         {"params": model.head.parameters(), "weight_decay": 0.01}], lr=3e-3)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(5):
    lens = rng.integers(4, 13, 8)
    ids = np.zeros((8, 12), np.int64)
    for i, l in enumerate(lens):
        ids[i, :l] = rng.integers(1, 50, l)
    ids = torch.from_numpy(ids); y = torch.from_numpy(rng.integers(0, 3, 8))
    loss = F.cross_entropy(net(ids), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True); loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    LOSSES.append(loss.item())
model.eval()
with torch.no_grad():
    before = net(ids)
    for m in model.modules():
        if parametrize.is_parametrized(m):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=True)
    merged = model(ids)
LOSSES += [float(n_train), before.sum().item(), (merged - before).abs().max().item() < 1e-5,
           model.blocks[0].qkv.weight.sum().item(), len(model.state_dict())]
