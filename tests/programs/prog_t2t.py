from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# Tokens-to-Token ViT (Yuan et al. 2021) at toy size: nn.Unfold soft splits re-structure
# tokens into overlapping patches between small transformer layers; a class token,
# a ViT encoder, mixed-precision-free training under CosineAnnealingLR with warmup via
# LambdaLR and SequentialLR, gradient clipping; F.fold reassembles an image from patches
# for a reconstruction auxiliary loss.
class Token_transformer(nn.Module):
    def __init__(self, dim, in_dim, mlp_ratio=1.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, in_dim * 3, bias=False)
        self.proj = nn.Linear(in_dim, in_dim)
        self.norm2 = nn.LayerNorm(in_dim)
        self.mlp = nn.Sequential(nn.Linear(in_dim, int(in_dim * mlp_ratio)), nn.GELU(), nn.Linear(int(in_dim * mlp_ratio), in_dim))
        self.scale = in_dim ** -0.5
        self.in_dim = in_dim
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, 1, self.in_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        x = self.proj((attn @ v).transpose(1, 2).reshape(B, N, self.in_dim))
        x = v.squeeze(1) + x   # T2T's skip from v, the token dim changing
        return x + self.mlp(self.norm2(x))

class T2T_module(nn.Module):
    def __init__(self, img=16, in_chans=3, token_dim=16, embed_dim=32):
        super().__init__()
        self.soft_split0 = nn.Unfold(kernel_size=(7, 7), stride=(4, 4), padding=(2, 2))
        self.soft_split1 = nn.Unfold(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))
        self.attention1 = Token_transformer(dim=in_chans * 7 * 7, in_dim=token_dim)
        self.project = nn.Linear(token_dim * 3 * 3, embed_dim)
        self.num_patches = (img // (4 * 2)) ** 2
    def forward(self, x):
        x = self.soft_split0(x).transpose(1, 2)          # B, 16, 147
        x = self.attention1(x)
        B, new_HW, C = x.shape
        x = x.transpose(1, 2).reshape(B, C, int(np.sqrt(new_HW)), int(np.sqrt(new_HW)))
        x = self.soft_split1(x).transpose(1, 2)
        return self.project(x)

class T2T_ViT(nn.Module):
    def __init__(self, n_cls=5, embed_dim=32, depth=2, heads=4):
        super().__init__()
        self.tokens_to_token = T2T_module(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.tokens_to_token.num_patches + 1, embed_dim) * 0.02)
        layer = nn.TransformerEncoderLayer(embed_dim, heads, 2 * embed_dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, n_cls)
        self.recon = nn.Linear(embed_dim, 3 * 8 * 8)
    def forward(self, x):
        x = self.tokens_to_token(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        patches = self.recon(x[:, 1:]).transpose(1, 2)                         # B, 3*8*8, 4
        img = F.fold(patches, output_size=(16, 16), kernel_size=8, stride=8)
        return self.head(x[:, 0]), img

model = T2T_ViT(); sync(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 3)
cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
net = comp(model)
rng = np.random.default_rng(0); LOSSES = []
for step in range(5):
    x = torch.from_numpy(rng.standard_normal((6, 3, 16, 16)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 5, 6))
    logits, img = net(x)
    loss = F.cross_entropy(logits, y) + 0.1 * F.smooth_l1_loss(img, x)
    opt.zero_grad(); loss.backward()
    gn = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step(); sched.step()
    LOSSES += [loss.item(), gn.item(), sched.get_last_lr()[0]]
model.eval()
with torch.no_grad():
    logits, img = net(x)
LOSSES += [logits.softmax(-1).max(-1).values.mean().item(), img.std().item()]
