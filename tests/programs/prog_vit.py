from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import math, numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
class PatchEmbed(nn.Module):
    def __init__(s, img=32, patch=4, c=3, d=48):
        super().__init__(); s.proj = nn.Conv2d(c, d, kernel_size=patch, stride=patch); s.n = (img // patch) ** 2
    def forward(s, x): return s.proj(x).flatten(2).transpose(1, 2)
class ViT(nn.Module):
    def __init__(s, d=48, depth=2, heads=4, ncls=10):
        super().__init__()
        s.patch = PatchEmbed(d=d)
        s.cls_token = nn.Parameter(torch.zeros(1, 1, d)); s.pos = nn.Parameter(torch.randn(1, s.patch.n + 1, d) * .02)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        s.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        s.norm = nn.LayerNorm(d, eps=1e-6); s.head = nn.Linear(d, ncls)
        nn.init.trunc_normal_(s.cls_token, std=.02)
    def forward(s, x):
        x = s.patch(x)
        cls = s.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + s.pos
        x = s.enc(x)
        return s.head(s.norm(x)[:, 0])
model = ViT(); sync(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
warm = 2
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: (e + 1) / warm if e < warm else 0.5 * (1 + math.cos(math.pi * (e - warm) / 10)))
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
r = np.random.default_rng(0); fwd = comp(model)
LOSSES = []
for i in range(4):
    model.train()
    x = torch.from_numpy(r.standard_normal((8, 3, 32, 32)).astype(np.float32)); y = torch.from_numpy(r.integers(0, 10, 8))
    out = fwd(x); loss = crit(out, y)
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    LOSSES.append(loss.item())
model.eval()
with torch.inference_mode():
    acc = (model(x).argmax(dim=-1) == y).float().mean().item()
LOSSES.append(acc); LOSSES.append(sched.get_last_lr()[0])
