from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from math import exp
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# 2-D Gaussian splatting fit to an image, written as graphdeco-inria/gaussian-splatting writes
# its model: parameters activated by properties (exp scales, sigmoid opacity, normalized
# rotations), Adam over named param groups (eps=1e-15), a renderer that sorts the Gaussians by
# depth (argsort, indexing) and alpha-composites front to back (cumprod of 1 - alpha made
# exclusive by cat), L1 + D-SSIM (its gaussian-window conv2d ssim), means' gradient norms
# accumulated under a visibility mask, and densification by cloning and pruning with the
# optimizer's state surgery (exp_avg cat'ed or masked, del optimizer.state[p], new
# nn.Parameter put back into group["params"]); the renderer compiled with dynamic=True
def inverse_sigmoid(x):
    return torch.log(x/(1-x))
def gaussian(window_size, sigma):
    gauss = torch.Tensor([exp(-(x - window_size // 2) ** 2 / float(2 * sigma ** 2)) for x in range(window_size)])
    return gauss / gauss.sum()
def create_window(window_size, channel):
    _1D_window = gaussian(window_size, 1.5).unsqueeze(1)
    _2D_window = _1D_window.mm(_1D_window.t()).float().unsqueeze(0).unsqueeze(0)
    window = _2D_window.expand(channel, 1, window_size, window_size).contiguous()
    return window
def ssim(img1, img2, window_size=5):
    channel = img1.size(-3)
    window = create_window(window_size, channel)
    mu1 = F.conv2d(img1, window, padding=window_size // 2, groups=channel)
    mu2 = F.conv2d(img2, window, padding=window_size // 2, groups=channel)
    mu1_sq = mu1.pow(2)
    mu2_sq = mu2.pow(2)
    mu1_mu2 = mu1 * mu2
    sigma1_sq = F.conv2d(img1 * img1, window, padding=window_size // 2, groups=channel) - mu1_sq
    sigma2_sq = F.conv2d(img2 * img2, window, padding=window_size // 2, groups=channel) - mu2_sq
    sigma12 = F.conv2d(img1 * img2, window, padding=window_size // 2, groups=channel) - mu1_mu2
    C1 = 0.01 ** 2
    C2 = 0.03 ** 2
    ssim_map = ((2 * mu1_mu2 + C1) * (2 * sigma12 + C2)) / ((mu1_sq + mu2_sq + C1) * (sigma1_sq + sigma2_sq + C2))
    return ssim_map.mean()
def render(xy, depth, scaling, rotation, opacity, colors, pixels, bg):
    """Front-to-back alpha compositing of 2-D Gaussians at pixel centres (P, 2) -> (3, P)."""
    order = torch.argsort(depth)
    xy, scaling, rotation, opacity, colors = xy[order], scaling[order], rotation[order], opacity[order], colors[order]
    c, s = rotation[:, 0], rotation[:, 1]
    sx2, sy2 = scaling[:, 0] ** 2, scaling[:, 1] ** 2
    a = c * c * sx2 + s * s * sy2                 # R S S^T R^T
    b = c * s * (sx2 - sy2)
    d = s * s * sx2 + c * c * sy2
    det = a * d - b * b
    conic = torch.stack([d / det, -b / det, a / det], dim=-1)
    delta = pixels[:, None, :] - xy[None]          # (P, N, 2)
    power = -0.5 * (conic[:, 0] * delta[..., 0] ** 2 + conic[:, 2] * delta[..., 1] ** 2) - conic[:, 1] * delta[..., 0] * delta[..., 1]
    alpha = torch.clamp(opacity[:, 0] * torch.exp(power.clamp(max=0.0)), max=0.99)
    T = torch.cumprod(1 - alpha, dim=1)
    T = torch.cat([torch.ones_like(T[:, :1]), T[:, :-1]], dim=1)
    weights = T * alpha
    image = weights @ colors + (T[:, -1:] * (1 - alpha[:, -1:])) * bg
    return image.t(), (weights > 1e-3).any(0)[torch.argsort(order)]
class GaussianModel:
    def __init__(self, r, n):
        self.scaling_activation = torch.exp
        self.opacity_activation = torch.sigmoid
        self.rotation_activation = torch.nn.functional.normalize
        self._xy = nn.Parameter(torch.from_numpy(r.uniform(0, 16, (n, 2)).astype(np.float32)))
        self._depth = nn.Parameter(torch.from_numpy(r.uniform(1, 2, n).astype(np.float32)))
        self._scaling = nn.Parameter(torch.full((n, 2), float(np.log(2.0))))
        self._rotation = nn.Parameter(torch.from_numpy(r.standard_normal((n, 2)).astype(np.float32)))
        self._opacity = nn.Parameter(inverse_sigmoid(0.5 * torch.ones((n, 1), dtype=torch.float)))
        self._color = nn.Parameter(torch.from_numpy(r.uniform(0, 1, (n, 3)).astype(np.float32)))
        self.xy_gradient_accum = torch.zeros((n, 1))
        self.denom = torch.zeros((n, 1))
    @property
    def get_scaling(self):
        return self.scaling_activation(self._scaling)
    @property
    def get_rotation(self):
        return self.rotation_activation(self._rotation)
    @property
    def get_opacity(self):
        return self.opacity_activation(self._opacity)
    def training_setup(self):
        l = [{'params': [self._xy], 'lr': 0.05, "name": "xy"},
             {'params': [self._depth], 'lr': 0.01, "name": "depth"},
             {'params': [self._scaling], 'lr': 0.01, "name": "scaling"},
             {'params': [self._rotation], 'lr': 0.01, "name": "rotation"},
             {'params': [self._opacity], 'lr': 0.05, "name": "opacity"},
             {'params': [self._color], 'lr': 0.02, "name": "color"}]
        self.optimizer = torch.optim.Adam(l, lr=0.0, eps=1e-15)
    def _set(self, tensors):
        self._xy, self._depth, self._scaling = tensors["xy"], tensors["depth"], tensors["scaling"]
        self._rotation, self._opacity, self._color = tensors["rotation"], tensors["opacity"], tensors["color"]
    def _prune_optimizer(self, mask):
        optimizable_tensors = {}
        for group in self.optimizer.param_groups:
            stored_state = self.optimizer.state.get(group['params'][0], None)
            if stored_state is not None:
                stored_state["exp_avg"] = stored_state["exp_avg"][mask]
                stored_state["exp_avg_sq"] = stored_state["exp_avg_sq"][mask]
                del self.optimizer.state[group['params'][0]]
                group["params"][0] = nn.Parameter((group["params"][0][mask].requires_grad_(True)))
                self.optimizer.state[group['params'][0]] = stored_state
                optimizable_tensors[group["name"]] = group["params"][0]
            else:
                group["params"][0] = nn.Parameter(group["params"][0][mask].requires_grad_(True))
                optimizable_tensors[group["name"]] = group["params"][0]
        return optimizable_tensors
    def prune_points(self, mask):
        valid_points_mask = ~mask
        self._set(self._prune_optimizer(valid_points_mask))
        self.xy_gradient_accum = self.xy_gradient_accum[valid_points_mask]
        self.denom = self.denom[valid_points_mask]
    def cat_tensors_to_optimizer(self, tensors_dict):
        optimizable_tensors = {}
        for group in self.optimizer.param_groups:
            assert len(group["params"]) == 1
            extension_tensor = tensors_dict[group["name"]]
            stored_state = self.optimizer.state.get(group['params'][0], None)
            if stored_state is not None:
                stored_state["exp_avg"] = torch.cat((stored_state["exp_avg"], torch.zeros_like(extension_tensor)), dim=0)
                stored_state["exp_avg_sq"] = torch.cat((stored_state["exp_avg_sq"], torch.zeros_like(extension_tensor)), dim=0)
                del self.optimizer.state[group['params'][0]]
                group["params"][0] = nn.Parameter(torch.cat((group["params"][0], extension_tensor), dim=0).requires_grad_(True))
                self.optimizer.state[group['params'][0]] = stored_state
                optimizable_tensors[group["name"]] = group["params"][0]
            else:
                group["params"][0] = nn.Parameter(torch.cat((group["params"][0], extension_tensor), dim=0).requires_grad_(True))
                optimizable_tensors[group["name"]] = group["params"][0]
        return optimizable_tensors
    def densify_and_clone(self, grads, grad_threshold):
        selected_pts_mask = torch.where(torch.norm(grads, dim=-1) >= grad_threshold, True, False)
        d = {"xy": self._xy[selected_pts_mask] + 0.5, "depth": self._depth[selected_pts_mask] + 0.01,
             "scaling": self._scaling[selected_pts_mask] - 0.2, "rotation": self._rotation[selected_pts_mask],
             "opacity": self._opacity[selected_pts_mask], "color": self._color[selected_pts_mask]}
        self._set(self.cat_tensors_to_optimizer(d))
        n = self._xy.shape[0]
        self.xy_gradient_accum = torch.zeros((n, 1))
        self.denom = torch.zeros((n, 1))
    def densify_and_prune(self, max_grad, min_opacity):
        grads = self.xy_gradient_accum / self.denom
        grads[grads.isnan()] = 0.0
        self.densify_and_clone(grads, max_grad)
        prune_mask = (self.get_opacity < min_opacity).squeeze()
        self.prune_points(prune_mask)
    def add_densification_stats(self, update_filter):
        self.xy_gradient_accum[update_filter] += torch.norm(self._xy.grad[update_filter], dim=-1, keepdim=True)
        self.denom[update_filter] += 1
H = W = 12
ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32) + 0.5, torch.arange(W, dtype=torch.float32) + 0.5, indexing="ij")
pixels = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
target = torch.stack([torch.sin(xs / 3.0) * 0.5 + 0.5, torch.cos(ys / 4.0) * 0.5 + 0.5, (xs + ys) / 24.0])
bg = torch.tensor([1.0, 1.0, 1.0])
r = np.random.default_rng(0)
gaussians = GaussianModel(r, 10)
with torch.no_grad():
    gaussians._opacity[::4] = -4.0                     # a few nearly transparent ones, pruned
gaussians.training_setup()
rasterize = comp(render, dynamic=True)
LOSSES = []
for iteration in range(1, 4):
    image, visibility = rasterize(gaussians._xy, gaussians._depth, gaussians.get_scaling, gaussians.get_rotation,
                                  gaussians.get_opacity, torch.sigmoid(gaussians._color), pixels, bg)
    image = image.view(3, H, W)
    Ll1 = torch.abs(image - target).mean()
    loss = 0.8 * Ll1 + 0.2 * (1.0 - ssim(image[None], target[None]))
    loss.backward()
    with torch.no_grad():
        gaussians.add_densification_stats(visibility)
        if iteration == 2:
            gaussians.densify_and_prune(0.002, 0.05)
        gaussians.optimizer.step()
        gaussians.optimizer.zero_grad(set_to_none=True)
    LOSSES += [loss.item(), Ll1.item(), gaussians._xy.shape[0], int(visibility.sum())]
LOSSES += gaussians._xy.flatten()[:12].tolist() + [len(gaussians.optimizer.state)]
LOSSES += gaussians.optimizer.state[gaussians._opacity]["exp_avg_sq"].flatten().tolist()
