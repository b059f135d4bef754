from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import io, math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# RWKV-4 (Peng et al. 2023) at toy size, as the RWKV-LM repo writes it without the CUDA
# kernel: token shift by ZeroPad2d, time-mix and channel-mix with learned mixing
# coefficients, the WKV recurrence as a Python loop over time with a running max for
# stability; trained as a character LM; then generates in RNN mode from its state,
# after a torch.jit-free save/load round trip of the weights through io.BytesIO.
class TimeMix(nn.Module):
    def __init__(self, d, layer_id, n_layer):
        super().__init__()
        ratio_0_to_1 = layer_id / max(n_layer - 1, 1)
        ratio_1_to_almost0 = 1.0 - layer_id / n_layer
        decay_speed = torch.tensor([-5 + 8 * (h / (d - 1)) ** (0.7 + 1.3 * ratio_0_to_1) for h in range(d)])
        self.time_decay = nn.Parameter(decay_speed)
        zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(d)]) * 0.5
        self.time_first = nn.Parameter(torch.ones(d) * math.log(0.3) + zigzag)
        x = (torch.arange(d) / d)[None, None, :]
        self.time_mix_k = nn.Parameter(torch.pow(x, ratio_1_to_almost0))
        self.time_mix_v = nn.Parameter(torch.pow(x, ratio_1_to_almost0) + 0.3 * ratio_0_to_1)
        self.time_mix_r = nn.Parameter(torch.pow(x, 0.5 * ratio_1_to_almost0))
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.key, self.value, self.receptance = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.output = nn.Linear(d, d, bias=False)
    def wkv(self, k, v):
        B, T, C = k.shape
        w, u = -torch.exp(self.time_decay), self.time_first
        aa = torch.zeros(B, C); bb = torch.zeros(B, C); pp = torch.full((B, C), -1e38)
        out = []
        for t in range(T):
            kk, vv = k[:, t], v[:, t]
            ww = u + kk
            p = torch.maximum(pp, ww)
            e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
            out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
            ww = pp + w
            p = torch.maximum(ww, kk)
            e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
            aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
        return torch.stack(out, dim=1)
    def forward(self, x):
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xv = x * self.time_mix_v + xx * (1 - self.time_mix_v)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k, v, sr = self.key(xk), self.value(xv), torch.sigmoid(self.receptance(xr))
        return self.output(sr * self.wkv(k, v))

class ChannelMix(nn.Module):
    def __init__(self, d, layer_id, n_layer):
        super().__init__()
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        x = (torch.arange(d) / d)[None, None, :]
        self.time_mix_k = nn.Parameter(torch.pow(x, 1.0 - layer_id / n_layer))
        self.time_mix_r = nn.Parameter(torch.pow(x, 1.0 - layer_id / n_layer))
        self.key, self.receptance, self.value = nn.Linear(d, 4 * d, bias=False), nn.Linear(d, d, bias=False), nn.Linear(4 * d, d, bias=False)
    def forward(self, x):
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k = torch.square(torch.relu(self.key(xk)))
        return torch.sigmoid(self.receptance(xr)) * self.value(k)

class Block(nn.Module):
    def __init__(self, d, i, n):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.att, self.ffn = TimeMix(d, i, n), ChannelMix(d, i, n)
        if i == 0:
            self.ln0 = nn.LayerNorm(d)
    def forward(self, x):
        if hasattr(self, "ln0"):
            x = self.ln0(x)
        x = x + self.att(self.ln1(x))
        return x + self.ffn(self.ln2(x))

class RWKV(nn.Module):
    def __init__(self, vocab=20, d=32, n_layer=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[Block(d, i, n_layer) for i in range(n_layer)])
        self.ln_out = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
    def forward(self, idx):
        return self.head(self.ln_out(self.blocks(self.emb(idx))))

text = "the quick brown fox jumps over the lazy dog " * 4
chars = sorted(set(text)); stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
model = RWKV(vocab=len(chars)); sync(model)
opt = torch.optim.Adam([{"params": [p for n, p in model.named_parameters() if "time_" in n], "lr": 4e-3},
                        {"params": [p for n, p in model.named_parameters() if "time_" not in n]}], lr=2e-3, betas=(0.9, 0.99), eps=1e-8)
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(4):
    ix = rng.integers(0, len(data) - 13, 4)
    x = torch.stack([data[i:i + 12] for i in ix]); y = torch.stack([data[i + 1:i + 13] for i in ix])
    logits = net(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES.append(loss.item())
buf = io.BytesIO(); torch.save(model.state_dict(), buf); buf.seek(0)
model2 = RWKV(vocab=len(chars)); model2.load_state_dict(torch.load(buf, weights_only=True)); model2.eval()
with torch.no_grad():
    ctx = data[:8][None]
    for _ in range(6):   # greedy, re-running the whole prefix (the GPT mode)
        nxt = net(ctx)[:, -1].argmax(-1, keepdim=True)
        ctx = torch.cat([ctx, nxt], dim=1)
    LOSSES += ctx[0, 8:].tolist() + [(model2(ctx) - net(ctx)).abs().max().item()]
