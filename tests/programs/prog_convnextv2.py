from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# ConvNeXt-V2's FCMAE pre-training (facebookresearch/ConvNeXt-V2), scaled down, dense
# (the repository's non-sparse path): random patch masks by argsort of noise with
# gather-free ids_restore, the mask upsampled by repeat_interleave and applied as
# x * (1. - mask) after the stem and before every stage, Global Response Normalization
# (torch.norm over H, W; divided by its channel mean) in channels-last blocks, a
# decoder of one block with a learnable mask token, per-patch normalized pixel targets by
# patchify (einsum), the loss over masked patches only; AdamW with layer-wise
# parameter groups (no weight decay for norms, biases, GRN's gamma/beta), gradient
# clipping; in eval, a fine-tuning head on the encoder's pooled features (the encoder
# compiled on its own, unmasked)


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        self.normalized_shape = (normalized_shape,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class GRN(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x):
        Gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        Nx = Gx / (Gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * Nx) + self.beta + x


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(x)))))
        x = x.permute(0, 3, 1, 2)
        return input + x


class Encoder(nn.Module):
    def __init__(self, in_chans=3, depths=(1, 1, 2, 1), dims=(8, 16, 24, 32)):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        self.downsample_layers.append(nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=2, stride=2),
                                                    LayerNorm(dims[0], eps=1e-6, data_format="channels_first")))
        for i in range(3):
            self.downsample_layers.append(nn.Sequential(LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                                                        nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2)))
        self.stages = nn.ModuleList([nn.Sequential(*[Block(dims[i]) for _ in range(depths[i])]) for i in range(4)])
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=.02)
            nn.init.constant_(m.bias, 0)

    def upsample_mask(self, mask, scale):
        p = int(mask.shape[1] ** .5)
        return mask.reshape(-1, p, p).repeat_interleave(scale, axis=1).repeat_interleave(scale, axis=2)

    def forward(self, x, mask):
        num_stages = len(self.stages)
        mask = self.upsample_mask(mask, 2 ** (num_stages - 1))
        mask = mask.unsqueeze(1).type_as(x)
        x = self.downsample_layers[0](x)
        x = x * (1. - mask)
        x = self.stages[0](x)
        for i in range(1, 4):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return x


class FCMAE(nn.Module):
    def __init__(self, img_size=32, patch_size=16, dims=(8, 16, 24, 32), decoder_embed_dim=16, mask_ratio=0.6,
                 norm_pix_loss=True):
        super().__init__()
        self.img_size, self.patch_size, self.mask_ratio = img_size, patch_size, mask_ratio
        self.num_patches = (img_size // patch_size) ** 2
        self.encoder = Encoder(dims=dims)
        self.proj = nn.Conv2d(dims[-1], decoder_embed_dim, kernel_size=1)
        self.mask_token = nn.Parameter(torch.zeros(1, decoder_embed_dim, 1, 1))
        self.decoder = nn.Sequential(Block(decoder_embed_dim))
        self.pred = nn.Conv2d(decoder_embed_dim, patch_size ** 2 * 3, kernel_size=1)
        self.norm_pix_loss = norm_pix_loss
        nn.init.normal_(self.mask_token, std=.02)

    def patchify(self, imgs):
        p = self.patch_size
        h = w = imgs.shape[2] // p
        x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, w, p))
        x = torch.einsum('nchpwq->nhwpqc', x)
        return x.reshape(shape=(imgs.shape[0], h * w, p ** 2 * 3))

    def forward_decoder(self, x, mask):
        x = self.proj(x)
        n, c, h, w = x.shape
        mask = mask.reshape(-1, h, w).unsqueeze(1).type_as(x)
        mask_token = self.mask_token.repeat(x.shape[0], 1, x.shape[2], x.shape[3])
        x = x * (1. - mask) + mask_token * mask
        return self.pred(self.decoder(x))

    def forward_loss(self, imgs, pred, mask):
        if len(pred.shape) == 4:
            n, c, _, _ = pred.shape
            pred = pred.reshape(n, c, -1)
            pred = torch.einsum('ncl->nlc', pred)
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.e-6) ** .5
        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)
        return (loss * mask).sum() / mask.sum()

    def forward(self, imgs, mask):
        x = self.encoder(imgs, mask)
        pred = self.forward_decoder(x, mask)
        return self.forward_loss(imgs, pred, mask), pred, mask


def gen_random_mask(x, mask_ratio, noise, patch_size):
    N = x.shape[0]
    L = (x.shape[2] // patch_size) ** 2
    len_keep = int(L * (1 - mask_ratio))
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    mask = torch.ones([N, L], device=x.device)
    mask[:, :len_keep] = 0
    return torch.gather(mask, dim=1, index=ids_restore)


def param_groups_weight_decay(model, weight_decay=1e-5):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name.endswith(".gamma") or name.endswith(".beta") \
                or name.endswith("mask_token"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{'params': no_decay, 'weight_decay': 0.}, {'params': decay, 'weight_decay': weight_decay}]


rng = np.random.default_rng(0)
net = FCMAE(img_size=64, patch_size=16)
sync(net)
model = comp(net)
optimizer = torch.optim.AdamW(param_groups_weight_decay(net, 0.05), lr=1.5e-3, betas=(0.9, 0.95))
LOSSES = []
for step in range(4):
    samples = torch.from_numpy(rng.standard_normal((4, 3, 64, 64)).astype(np.float32))
    noise = torch.from_numpy(rng.random((4, 16)).astype(np.float32))
    mask = gen_random_mask(samples, net.mask_ratio, noise, net.patch_size)
    loss, _, _ = model(samples, mask)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    optimizer.step()
    LOSSES.append(loss.item())
head = nn.Linear(32, 5); sync(head)
encoder = comp(net.encoder)
net.eval()
with torch.no_grad():
    samples = torch.from_numpy(rng.standard_normal((2, 3, 64, 64)).astype(np.float32))
    feats = encoder(samples, torch.zeros(2, 16))
    LOSSES += head(feats.mean([-2, -1])).flatten().tolist()
    LOSSES.append(model(samples, gen_random_mask(samples, 0.6, torch.from_numpy(rng.random((2, 16)).astype(np.float32)), 16))[0].item())
