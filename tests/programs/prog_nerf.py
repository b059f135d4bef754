from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# NeRF (Mildenhall et al. 2020) as nerf-pytorch writes it: coarse + fine MLP, hierarchical sampling
class Embedder:
    def __init__(s, multires, include_input=True):
        s.fns = [lambda x: x] if include_input else []
        for freq in 2. ** torch.linspace(0., multires - 1, steps=multires):
            for p_fn in (torch.sin, torch.cos):
                s.fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
        s.out_dim = len(s.fns) * 3
    def embed(s, inputs): return torch.cat([fn(inputs) for fn in s.fns], -1)
class NeRF(nn.Module):
    def __init__(s, D=4, W=32, input_ch=3, input_ch_views=3, skips=(2,)):
        super().__init__(); s.skips = skips; s.input_ch, s.input_ch_views = input_ch, input_ch_views
        s.pts_linears = nn.ModuleList([nn.Linear(input_ch, W)] + [nn.Linear(W + input_ch, W) if i in skips else nn.Linear(W, W) for i in range(1, D)])
        s.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        s.feature_linear = nn.Linear(W, W); s.alpha_linear = nn.Linear(W, 1); s.rgb_linear = nn.Linear(W // 2, 3)
    def forward(s, x):
        input_pts, input_views = torch.split(x, [s.input_ch, s.input_ch_views], dim=-1)
        h = input_pts
        for i, l in enumerate(s.pts_linears):
            h = F.relu(l(h))
            if i + 1 in s.skips: h = torch.cat([input_pts, h], -1)
        alpha = s.alpha_linear(h); h = torch.cat([s.feature_linear(h), input_views], -1)
        for l in s.views_linears: h = F.relu(l(h))
        return torch.cat([s.rgb_linear(h), alpha], -1)
def get_rays(H, W, focal, c2w):
    i, j = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H), indexing='ij')
    i, j = i.t(), j.t()
    dirs = torch.stack([(i - W * .5) / focal, -(j - H * .5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3, :3], -1)
    return c2w[:3, -1].expand(rays_d.shape), rays_d
def raw2outputs(raw, z_vals, rays_d):
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1. - torch.exp(-act_fn(raw) * dists)
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3]); alpha = raw2alpha(raw[..., 3], dists)
    weights = alpha * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1. - alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1. / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)
    return rgb_map + (1. - acc_map[..., None]), disp_map, acc_map, weights, depth_map
def sample_pdf(bins, weights, N_samples, u):
    weights = weights + 1e-5; pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1); cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = (cdf_g[..., 1] - cdf_g[..., 0]); denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])
embed, embed_dirs = Embedder(6), Embedder(2)
coarse = NeRF(input_ch=embed.out_dim, input_ch_views=embed_dirs.out_dim); fine = NeRF(input_ch=embed.out_dim, input_ch_views=embed_dirs.out_dim)
sync(coarse, fine); fc, ff = comp(coarse), comp(fine)
def run(fn, pts, viewdirs):
    dirs = viewdirs[:, None].expand(pts.shape)
    h = torch.cat([embed.embed(pts.reshape(-1, 3)), embed_dirs.embed(dirs.reshape(-1, 3))], -1)
    return fn(h).reshape(list(pts.shape[:-1]) + [4])
def render(rays_o, rays_d, near, far, t_rand, u, N_samples=16, N_importance=16):
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    t_vals = torch.linspace(0., 1., steps=N_samples)
    z_vals = (near * (1. - t_vals) + far * t_vals).expand([rays_o.shape[0], N_samples])
    mids = .5 * (z_vals[..., 1:] + z_vals[..., :-1])
    upper = torch.cat([mids, z_vals[..., -1:]], -1); lower = torch.cat([z_vals[..., :1], mids], -1)
    z_vals = lower + (upper - lower) * t_rand
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    rgb0, _, _, weights, _ = raw2outputs(run(fc, pts, viewdirs), z_vals, rays_d)
    z_samples = sample_pdf(.5 * (z_vals[..., 1:] + z_vals[..., :-1]), weights[..., 1:-1], N_importance, u).detach()
    z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    rgb, disp, acc, _, _ = raw2outputs(run(ff, pts, viewdirs), z_vals, rays_d)
    return rgb, rgb0, disp
H = W = 8; focal = 10.
img2mse = lambda x, y: torch.mean((x - y) ** 2)
mse2psnr = lambda x: -10. * torch.log(x) / torch.log(torch.Tensor([10.]))
opt = torch.optim.Adam(list(coarse.parameters()) + list(fine.parameters()), lr=5e-4, betas=(0.9, 0.999))
r = np.random.default_rng(0); LOSSES = []
for it in range(3):
    c2w = torch.from_numpy(np.concatenate([np.eye(3), r.uniform(-1, 1, (3, 1))], 1).astype(np.float32))
    rays_o, rays_d = get_rays(H, W, focal, c2w)
    sel = torch.from_numpy(r.choice(H * W, 32, replace=False))
    rays_o, rays_d = rays_o.reshape(-1, 3)[sel], rays_d.reshape(-1, 3)[sel]
    target = torch.from_numpy(r.random((32, 3)).astype(np.float32))
    t_rand = torch.from_numpy(r.random((32, 16)).astype(np.float32)); u = torch.from_numpy(r.random((32, 16)).astype(np.float32))
    rgb, rgb0, disp = render(rays_o, rays_d, 2., 6., t_rand, u)
    loss = img2mse(rgb, target) + img2mse(rgb0, target); psnr = mse2psnr(img2mse(rgb, target))
    opt.zero_grad(); loss.backward(); opt.step()
    for g in opt.param_groups: g['lr'] = 5e-4 * (0.1 ** ((it + 1) / 250))
    LOSSES += [loss.item(), psnr.item(), torch.nan_to_num(disp, nan=0.0).mean().item()]
