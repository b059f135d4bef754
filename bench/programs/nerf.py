"""NeRF volume rendering with hierarchical sampling, as nerf-pytorch writes it, scaled down.

Positional encoding (sin/cos of 2^k x, 10 frequencies for points, 4 for directions), a
coarse and a fine MLP (4 layers of 64, a skip connection, a view-dependent RGB head);
per batch of 256 rays from random camera poses: 32 stratified samples (``linspace`` plus
jitter) composited by alpha and the ``cumprod`` transmittance, then 32 more drawn from
the coarse weights' CDF by inverse-transform sampling (``searchsorted``, ``gather``),
sorted in, and composited again; MSE on both renderings, Adam(5e-4). The jitter and the
CDF's uniforms are drawn with numpy. Compiled: the two MLPs.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import load_params, rng

NAME = "nerf"
RAYS, N_SAMPLES, N_IMPORTANCE, H, W, FOCAL = 256, 32, 32, 32, 32, 40.0


class Embedder:
    def __init__(self, multires):
        self.fns = [lambda x: x]
        for freq in 2.0 ** torch.linspace(0.0, multires - 1, steps=multires):
            for p_fn in (torch.sin, torch.cos):
                self.fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
        self.out_dim = 3 * len(self.fns)

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.fns], -1)


class NeRF(nn.Module):
    def __init__(self, D=4, W=64, input_ch=63, input_ch_views=27, skips=(2,)):
        super().__init__()
        self.skips, self.input_ch, self.input_ch_views = skips, input_ch, input_ch_views
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)] + [nn.Linear(W + input_ch, W) if i in skips else nn.Linear(W, W)
                                        for i in range(1, D)])
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        self.feature_linear = nn.Linear(W, W)
        self.alpha_linear = nn.Linear(W, 1)
        self.rgb_linear = nn.Linear(W // 2, 3)

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, layer in enumerate(self.pts_linears):
            h = F.relu(layer(h))
            if i + 1 in self.skips:
                h = torch.cat([input_pts, h], -1)
        alpha = self.alpha_linear(h)
        h = torch.cat([self.feature_linear(h), input_views], -1)
        for layer in self.views_linears:
            h = F.relu(layer(h))
        return torch.cat([self.rgb_linear(h), alpha], -1)


def get_rays(c2w):
    i, j = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H), indexing="ij")
    i, j = i.t(), j.t()
    dirs = torch.stack([(i - W * 0.5) / FOCAL, -(j - H * 0.5) / FOCAL, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    return c2w[:3, -1].expand(rays_d.shape), rays_d


def raw2outputs(raw, z_vals, rays_d):
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
    trans = torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1), -1)
    weights = alpha * trans[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    acc_map = torch.sum(weights, -1)
    return rgb_map + (1.0 - acc_map[..., None]), weights


def sample_pdf(bins, weights, u):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[..., :1]), torch.cumsum(pdf, -1)], -1)
    inds = torch.searchsorted(cdf, u.contiguous(), right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


class Program:
    def __init__(self, compile):
        r = rng(NAME)
        self.embed, self.embed_dirs = Embedder(10), Embedder(4)
        self.coarse, self.fine = NeRF(), NeRF()
        load_params(NAME, self.coarse, self.fine)
        self.net_coarse, self.net_fine = compile(self.coarse), compile(self.fine)
        self.optimizer = torch.optim.Adam(list(self.coarse.parameters()) + list(self.fine.parameters()),
                                          lr=5e-4, betas=(0.9, 0.999))
        self.batches = []
        for _ in range(4):
            c2w = torch.from_numpy(np.concatenate([np.eye(3), r.uniform(-1, 1, (3, 1))], 1).astype("float32"))
            self.batches.append((c2w, torch.from_numpy(r.choice(H * W, RAYS, replace=False)),
                                 torch.from_numpy(r.random((RAYS, 3), dtype="float32")),
                                 torch.from_numpy(r.random((RAYS, N_SAMPLES), dtype="float32")),
                                 torch.from_numpy(r.random((RAYS, N_IMPORTANCE), dtype="float32"))))
        self.i = 0

    def run(self, net, pts, viewdirs):
        dirs = viewdirs[:, None].expand(pts.shape)
        h = torch.cat([self.embed.embed(pts.reshape(-1, 3)), self.embed_dirs.embed(dirs.reshape(-1, 3))], -1)
        return net(h).reshape(list(pts.shape[:-1]) + [4])

    def render(self, rays_o, rays_d, t_rand, u, near=2.0, far=6.0):
        viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
        t_vals = torch.linspace(0.0, 1.0, steps=N_SAMPLES)
        z_vals = (near * (1.0 - t_vals) + far * t_vals).expand([rays_o.shape[0], N_SAMPLES])
        mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        upper = torch.cat([mids, z_vals[..., -1:]], -1)
        lower = torch.cat([z_vals[..., :1], mids], -1)
        z_vals = lower + (upper - lower) * t_rand
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        rgb0, weights = raw2outputs(self.run(self.net_coarse, pts, viewdirs), z_vals, rays_d)
        z_samples = sample_pdf(0.5 * (z_vals[..., 1:] + z_vals[..., :-1]), weights[..., 1:-1], u).detach()
        z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        rgb, _ = raw2outputs(self.run(self.net_fine, pts, viewdirs), z_vals, rays_d)
        return rgb, rgb0

    def step(self) -> float:
        c2w, sel, target, t_rand, u = self.batches[self.i % len(self.batches)]
        self.i += 1
        rays_o, rays_d = get_rays(c2w)
        rays_o, rays_d = rays_o.reshape(-1, 3)[sel], rays_d.reshape(-1, 3)[sel]
        rgb, rgb0 = self.render(rays_o, rays_d, t_rand, u)
        loss = torch.mean((rgb - target) ** 2) + torch.mean((rgb0 - target) ** 2)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
