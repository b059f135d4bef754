from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# SIREN as its explore_siren notebook writes it: SineLayers (sin(omega_0 * linear), the first
# layer's and the hidden layers' uniform inits), an outermost linear layer, the forward taking
# coords.clone().detach().requires_grad_(True) and returning them beside the output, the
# image's gradient by torch.autograd.grad(create_graph=True) and its Laplacian as the
# divergence of that gradient; a Poisson fit (the loss on the gradient field only, trained
# through the double backward) then a fit of the image by Adam; the image and its analytic
# gradient drawn in numpy on a 24x24 grid
class SineLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True, is_first=False, omega_0=30):
        super().__init__()
        self.omega_0, self.is_first, self.in_features = omega_0, is_first, in_features
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.init_weights()
    def init_weights(self):
        with torch.no_grad():
            if self.is_first:
                self.linear.weight.uniform_(-1 / self.in_features, 1 / self.in_features)
            else:
                self.linear.weight.uniform_(-np.sqrt(6 / self.in_features) / self.omega_0,
                                            np.sqrt(6 / self.in_features) / self.omega_0)
    def forward(self, input):
        return torch.sin(self.omega_0 * self.linear(input))
class Siren(nn.Module):
    def __init__(self, in_features, hidden_features, hidden_layers, out_features, outermost_linear=False,
                 first_omega_0=30, hidden_omega_0=30.):
        super().__init__()
        self.net = [SineLayer(in_features, hidden_features, is_first=True, omega_0=first_omega_0)]
        for i in range(hidden_layers):
            self.net.append(SineLayer(hidden_features, hidden_features, is_first=False, omega_0=hidden_omega_0))
        if outermost_linear:
            final_linear = nn.Linear(hidden_features, out_features)
            with torch.no_grad():
                final_linear.weight.uniform_(-np.sqrt(6 / hidden_features) / hidden_omega_0,
                                             np.sqrt(6 / hidden_features) / hidden_omega_0)
            self.net.append(final_linear)
        else:
            self.net.append(SineLayer(hidden_features, out_features, is_first=False, omega_0=hidden_omega_0))
        self.net = nn.Sequential(*self.net)
    def forward(self, coords):
        coords = coords.clone().detach().requires_grad_(True)  # allows to take derivative w.r.t. input
        output = self.net(coords)
        return output, coords
def laplace(y, x):
    grad = gradient(y, x)
    return divergence(grad, x)
def divergence(y, x):
    div = 0.
    for i in range(y.shape[-1]):
        div += torch.autograd.grad(y[..., i], x, torch.ones_like(y[..., i]), create_graph=True)[0][..., i:i + 1]
    return div
def gradient(y, x, grad_outputs=None):
    if grad_outputs is None:
        grad_outputs = torch.ones_like(y)
    grad = torch.autograd.grad(y, [x], grad_outputs=grad_outputs, create_graph=True)[0]
    return grad
def get_mgrid(sidelen, dim=2):
    tensors = tuple(dim * [torch.linspace(-1, 1, steps=sidelen)])
    mgrid = torch.stack(torch.meshgrid(*tensors, indexing='ij'), dim=-1)
    return mgrid.reshape(-1, dim)
sidelen = 24
coords = get_mgrid(sidelen)
c = coords.numpy().astype(np.float64)
pixels = np.sin(3 * c[:, :1]) * np.cos(2 * c[:, 1:]) + 0.5 * np.exp(-4 * (c ** 2).sum(1, keepdims=True))
grads = np.concatenate([3 * np.cos(3 * c[:, :1]) * np.cos(2 * c[:, 1:]), -2 * np.sin(3 * c[:, :1]) * np.sin(2 * c[:, 1:])], 1) \
    - 4 * c * np.exp(-4 * (c ** 2).sum(1, keepdims=True))
pixels = torch.from_numpy(pixels.astype(np.float32))[None]; grads = torch.from_numpy(grads.astype(np.float32))[None]
model_input = coords[None]
LOSSES = []
poisson_siren = Siren(in_features=2, out_features=1, hidden_features=32, hidden_layers=2, outermost_linear=True)
img_siren = Siren(in_features=2, out_features=1, hidden_features=32, hidden_layers=2, outermost_linear=True)
sync(poisson_siren, img_siren)
poisson, fit = comp(poisson_siren), comp(img_siren)
optim = torch.optim.Adam(lr=1e-4, params=poisson_siren.parameters())
for step in range(4):
    model_output, coords_out = poisson(model_input)
    train_loss = ((gradient(model_output, coords_out) - grads) ** 2).mean()
    optim.zero_grad()
    train_loss.backward()
    optim.step()
    LOSSES.append(train_loss.item())
optim = torch.optim.Adam(lr=1e-4, params=img_siren.parameters())
for step in range(4):
    model_output, coords_out = fit(model_input)
    loss = ((model_output - pixels) ** 2).mean()
    img_grad = gradient(model_output, coords_out)
    img_laplacian = laplace(model_output, coords_out)
    optim.zero_grad()
    loss.backward()
    optim.step()
    LOSSES += [loss.item(), img_grad.norm(dim=-1).mean().item(), img_laplacian.abs().mean().item()]
