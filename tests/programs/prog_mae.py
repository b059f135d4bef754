from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# a masked autoencoder (He et al. 2021) as facebookresearch/mae writes it, scaled down
def sincos_pos_embed(dim, grid):
    g = np.stack(np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32)), 0).reshape(2, -1)
    omega = 1.0 / 10000 ** (np.arange(dim // 4, dtype=np.float32) / (dim / 4.0))
    out = [np.concatenate([np.sin(np.outer(p, omega)), np.cos(np.outer(p, omega))], 1) for p in g]
    return np.concatenate([np.zeros([1, dim], np.float32), np.concatenate(out, 1)], 0).astype(np.float32)
class Attention(nn.Module):
    def __init__(s, dim, heads):
        super().__init__(); s.heads = heads; s.scale = (dim // heads) ** -0.5
        s.qkv = nn.Linear(dim, dim * 3); s.proj = nn.Linear(dim, dim)
    def forward(s, x):
        B, N, C = x.shape
        qkv = s.qkv(x).reshape(B, N, 3, s.heads, C // s.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * s.scale
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, C)
        return s.proj(x)
class Block(nn.Module):
    def __init__(s, dim, heads):
        super().__init__(); s.norm1 = nn.LayerNorm(dim, eps=1e-6); s.attn = Attention(dim, heads)
        s.norm2 = nn.LayerNorm(dim, eps=1e-6); s.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
    def forward(s, x):
        x = x + s.attn(s.norm1(x)); return x + s.mlp(s.norm2(x))
class MAE(nn.Module):
    def __init__(s, img=16, p=4, chans=3, dim=32, depth=2, heads=4, ddim=24, ddepth=1, dheads=4, norm_pix_loss=True):
        super().__init__(); s.p = p; s.L = (img // p) ** 2; s.norm_pix_loss = norm_pix_loss
        s.patch_embed = nn.Conv2d(chans, dim, p, p); s.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        s.register_buffer("pos_embed", torch.from_numpy(sincos_pos_embed(dim, img // p)).unsqueeze(0))
        s.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)]); s.norm = nn.LayerNorm(dim, eps=1e-6)
        s.decoder_embed = nn.Linear(dim, ddim); s.mask_token = nn.Parameter(torch.zeros(1, 1, ddim))
        s.register_buffer("decoder_pos_embed", torch.from_numpy(sincos_pos_embed(ddim, img // p)).unsqueeze(0))
        s.decoder_blocks = nn.ModuleList([Block(ddim, dheads) for _ in range(ddepth)])
        s.decoder_norm = nn.LayerNorm(ddim, eps=1e-6); s.decoder_pred = nn.Linear(ddim, p * p * chans)
        torch.nn.init.normal_(s.cls_token, std=.02); torch.nn.init.normal_(s.mask_token, std=.02)
    def patchify(s, imgs):
        p = s.p; h = w = imgs.shape[2] // p
        x = imgs.reshape(shape=(imgs.shape[0], 3, h, p, w, p))
        x = torch.einsum('nchpwq->nhwpqc', x)
        return x.reshape(shape=(imgs.shape[0], h * w, p ** 2 * 3))
    def random_masking(s, x, mask_ratio, noise):
        N, L, D = x.shape; len_keep = int(L * (1 - mask_ratio))
        ids_shuffle = torch.argsort(noise, dim=1); ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))
        mask = torch.ones([N, L], device=x.device); mask[:, :len_keep] = 0
        mask = torch.gather(mask, dim=1, index=ids_restore)
        return x_masked, mask, ids_restore
    def forward_encoder(s, x, mask_ratio, noise):
        x = s.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + s.pos_embed[:, 1:, :]
        x, mask, ids_restore = s.random_masking(x, mask_ratio, noise)
        cls_token = s.cls_token + s.pos_embed[:, :1, :]
        x = torch.cat((cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        for blk in s.blocks: x = blk(x)
        return s.norm(x), mask, ids_restore
    def forward_decoder(s, x, ids_restore):
        x = s.decoder_embed(x)
        mask_tokens = s.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1) + s.decoder_pos_embed
        for blk in s.decoder_blocks: x = blk(x)
        return s.decoder_pred(s.decoder_norm(x))[:, 1:, :]
    def forward_loss(s, imgs, pred, mask):
        target = s.patchify(imgs)
        if s.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True); var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.e-6) ** .5
        loss = ((pred - target) ** 2).mean(dim=-1)
        return (loss * mask).sum() / mask.sum()
    def forward(s, imgs, mask_ratio=0.75, noise=None):
        if noise is None: noise = torch.rand(imgs.shape[0], s.L, device=imgs.device)
        latent, mask, ids_restore = s.forward_encoder(imgs, mask_ratio, noise)
        pred = s.forward_decoder(latent, ids_restore)
        return s.forward_loss(imgs, pred, mask), pred, mask
model = MAE(); sync(model); fwd = comp(model)
opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05)
r = np.random.default_rng(0); LOSSES = []
for it in range(3):
    imgs = torch.from_numpy(r.standard_normal((4, 3, 16, 16)).astype(np.float32))
    noise = torch.from_numpy(r.random((4, 16)).astype(np.float32))  # torch.rand's role
    loss, pred, mask = fwd(imgs, 0.75, noise)
    opt.zero_grad(); loss.backward(); opt.step(); LOSSES += [loss.item(), mask.sum().item()]
with torch.no_grad():  # the framework's own noise: only what does not depend on its values
    _, pred, mask = model(imgs)
    LOSSES += [mask.sum().item(), float(pred.shape[1]), (mask.sum(1) == 12).all().item()]
