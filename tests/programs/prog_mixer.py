from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from functools import partial
torch.manual_seed(0)
# MLP-Mixer (Tolstikhin et al. 2021) as lucidrains/mlp-mixer-pytorch and timm write it,
# scaled down: patches by an einops-style rearrange (view/permute/reshape) into a Linear,
# token mixing by a Conv1d of kernel 1 over the patch axis (lucidrains' chan_first) in
# one variant and by transposing around an nn.Linear in the other (timm's), channel mixing
# by Linear-GELU-Linear, pre-LayerNorm residuals, mean over tokens, a Linear head;
# SGD with Nesterov momentum under a OneCycleLR, forward hooks recording the token
# mixers' output norms (removed by their handles), a buffer counting samples seen (+= in forward)
def rearrange_patches(img, p):
    # 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'
    b, c, H, W = img.shape
    h, w = H // p, W // p
    x = img.view(b, c, h, p, w, p)
    x = x.permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, h * w, p * p * c)
class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
    def forward(self, x):
        return self.fn(self.norm(x)) + x
def FeedForward(dim, expansion_factor=4, dropout=0., dense=nn.Linear):
    inner_dim = int(dim * expansion_factor)
    return nn.Sequential(dense(dim, inner_dim), nn.GELU(), nn.Dropout(dropout),
                         dense(inner_dim, dim), nn.Dropout(dropout))
class MLPMixer(nn.Module):
    def __init__(self, *, image_size, channels, patch_size, dim, depth, num_classes,
                 expansion_factor=4, expansion_factor_token=0.5, dropout=0.):
        super().__init__()
        assert (image_size % patch_size) == 0, 'image must be divisible by patch size'
        num_patches = (image_size // patch_size) ** 2
        chan_first, chan_last = partial(nn.Conv1d, kernel_size=1), nn.Linear
        self.patch_size = patch_size
        self.to_embedding = nn.Linear((patch_size ** 2) * channels, dim)
        self.layers = nn.Sequential(*[nn.Sequential(
            PreNormResidual(dim, FeedForward(num_patches, expansion_factor, dropout, chan_first)),
            PreNormResidual(dim, FeedForward(dim, expansion_factor_token, dropout, chan_last)))
            for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
    def forward(self, img):
        x = self.to_embedding(rearrange_patches(img, self.patch_size))
        x = self.layers(x)
        x = self.norm(x)
        return self.head(x.mean(dim=1))   # Reduce('b n c -> b c', 'mean')
class MixerBlock(nn.Module):   # timm's: token mixing by transposes
    def __init__(self, dim, seq_len, mlp_ratio=(0.5, 4.0), norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        tokens_dim, channels_dim = [int(x * dim) for x in mlp_ratio]
        self.norm1 = norm_layer(dim)
        self.mlp_tokens = nn.Sequential(nn.Linear(seq_len, tokens_dim), nn.GELU(approximate='tanh'),
                                        nn.Linear(tokens_dim, seq_len))
        self.norm2 = norm_layer(dim)
        self.mlp_channels = nn.Sequential(nn.Linear(dim, channels_dim), nn.GELU(), nn.Linear(channels_dim, dim))
    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        x = x + self.mlp_channels(self.norm2(x))
        return x
class TimmMixer(nn.Module):
    def __init__(self, num_classes=10, img_size=32, in_chans=3, patch_size=4, num_blocks=3, embed_dim=32):
        super().__init__()
        self.stem = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.blocks = nn.Sequential(*[MixerBlock(embed_dim, (img_size // patch_size) ** 2)
                                      for _ in range(num_blocks)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)
        self.register_buffer("seen", torch.zeros(()))
    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)  # NCHW -> NLC
        x = self.blocks(x)
        x = self.norm(x)
        if self.training:
            self.seen += x.shape[0]
        return self.head(x.mean(dim=1))
a = MLPMixer(image_size=32, channels=3, patch_size=4, dim=32, depth=3, num_classes=10)
b = TimmMixer(); sync(a, b)
norms = []   # the token mixers' output norms, by forward hooks (a graph output per call compiled)
handles = [blk.mlp_tokens.register_forward_hook(lambda mod, inp, out: norms.append(out.detach().norm()))
           for blk in b.blocks]
r = np.random.default_rng(0)
LOSSES = []
for model in (a, b):
    net = comp(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=5, pct_start=0.4)
    for step in range(5):
        x = torch.from_numpy(r.standard_normal((8, 3, 32, 32)).astype(np.float32))
        y = torch.from_numpy(r.integers(0, 10, 8))
        model.train()
        logits = net(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        LOSSES += [loss.item(), sched.get_last_lr()[0]]
    model.eval()
    with torch.no_grad():
        LOSSES += F.log_softmax(net(x[:3]), dim=-1).max(-1).values.tolist()
LOSSES += [n.item() for n in norms[::4]] + [len(norms)]
for h in handles:
    h.remove()
with torch.no_grad():
    b(x[:2])
LOSSES += [len(norms), b.seen.item()]
