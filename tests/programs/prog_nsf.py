from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# Neural spline flows as nflows writes them: rational-quadratic spline couplings with linear
# tails (inputs outside [-B, B] copied through by boolean masks, the inside ones written back
# by masked assignment), bins by softmax widths and heights (cumsum, F.pad, ends pinned by
# in-place writes), derivatives by softplus, each input's bin by torch.searchsorted and
# gathers, the inverse by the quadratic's stable root; a residual conditioner MLP, alternating
# masks and fixed permutations, a standard normal base; maximum likelihood on a 4-d mixture
# under Adam, CosineAnnealingLR and clip_grad_norm_; sampling by the inverse, compiled
DEFAULT_MIN_BIN_WIDTH = 1e-3
DEFAULT_MIN_BIN_HEIGHT = 1e-3
DEFAULT_MIN_DERIVATIVE = 1e-3
def unconstrained_rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights,
                                            unnormalized_derivatives, inverse=False, tail_bound=1.0):
    inside_interval_mask = (inputs >= -tail_bound) & (inputs <= tail_bound)
    outside_interval_mask = ~inside_interval_mask
    outputs = torch.zeros_like(inputs)
    logabsdet = torch.zeros_like(inputs)
    unnormalized_derivatives = F.pad(unnormalized_derivatives, pad=(1, 1))
    constant = np.log(np.exp(1 - DEFAULT_MIN_DERIVATIVE) - 1)
    unnormalized_derivatives[..., 0] = constant
    unnormalized_derivatives[..., -1] = constant
    outputs[outside_interval_mask] = inputs[outside_interval_mask]
    logabsdet[outside_interval_mask] = 0
    outputs[inside_interval_mask], logabsdet[inside_interval_mask] = rational_quadratic_spline(
        inputs=inputs[inside_interval_mask],
        unnormalized_widths=unnormalized_widths[inside_interval_mask, :],
        unnormalized_heights=unnormalized_heights[inside_interval_mask, :],
        unnormalized_derivatives=unnormalized_derivatives[inside_interval_mask, :],
        inverse=inverse, left=-tail_bound, right=tail_bound, bottom=-tail_bound, top=tail_bound)
    return outputs, logabsdet
def rational_quadratic_spline(inputs, unnormalized_widths, unnormalized_heights, unnormalized_derivatives,
                              inverse=False, left=0., right=1., bottom=0., top=1.):
    num_bins = unnormalized_widths.shape[-1]
    widths = F.softmax(unnormalized_widths, dim=-1)
    widths = DEFAULT_MIN_BIN_WIDTH + (1 - DEFAULT_MIN_BIN_WIDTH * num_bins) * widths
    cumwidths = torch.cumsum(widths, dim=-1)
    cumwidths = F.pad(cumwidths, pad=(1, 0), mode='constant', value=0.0)
    cumwidths = (right - left) * cumwidths + left
    cumwidths[..., 0] = left
    cumwidths[..., -1] = right
    widths = cumwidths[..., 1:] - cumwidths[..., :-1]
    derivatives = DEFAULT_MIN_DERIVATIVE + F.softplus(unnormalized_derivatives)
    heights = F.softmax(unnormalized_heights, dim=-1)
    heights = DEFAULT_MIN_BIN_HEIGHT + (1 - DEFAULT_MIN_BIN_HEIGHT * num_bins) * heights
    cumheights = torch.cumsum(heights, dim=-1)
    cumheights = F.pad(cumheights, pad=(1, 0), mode='constant', value=0.0)
    cumheights = (top - bottom) * cumheights + bottom
    cumheights[..., 0] = bottom
    cumheights[..., -1] = top
    heights = cumheights[..., 1:] - cumheights[..., :-1]
    locations = cumheights if inverse else cumwidths
    bin_idx = (torch.searchsorted(locations, inputs[..., None], right=True) - 1).clamp(0, num_bins - 1)
    input_cumwidths = cumwidths.gather(-1, bin_idx)[..., 0]
    input_bin_widths = widths.gather(-1, bin_idx)[..., 0]
    input_cumheights = cumheights.gather(-1, bin_idx)[..., 0]
    delta = heights / widths
    input_delta = delta.gather(-1, bin_idx)[..., 0]
    input_derivatives = derivatives.gather(-1, bin_idx)[..., 0]
    input_derivatives_plus_one = derivatives[..., 1:].gather(-1, bin_idx)[..., 0]
    input_heights = heights.gather(-1, bin_idx)[..., 0]
    if inverse:
        a = (((inputs - input_cumheights) * (input_derivatives + input_derivatives_plus_one - 2 * input_delta)
              + input_heights * (input_delta - input_derivatives)))
        b = (input_heights * input_derivatives
             - (inputs - input_cumheights) * (input_derivatives + input_derivatives_plus_one - 2 * input_delta))
        c = - input_delta * (inputs - input_cumheights)
        discriminant = b.pow(2) - 4 * a * c
        root = (2 * c) / (-b - torch.sqrt(discriminant))
        outputs = root * input_bin_widths + input_cumwidths
        theta_one_minus_theta = root * (1 - root)
        denominator = input_delta + ((input_derivatives + input_derivatives_plus_one - 2 * input_delta)
                                     * theta_one_minus_theta)
        derivative_numerator = input_delta.pow(2) * (input_derivatives_plus_one * root.pow(2)
                                                     + 2 * input_delta * theta_one_minus_theta
                                                     + input_derivatives * (1 - root).pow(2))
        logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
        return outputs, -logabsdet
    theta = (inputs - input_cumwidths) / input_bin_widths
    theta_one_minus_theta = theta * (1 - theta)
    numerator = input_heights * (input_delta * theta.pow(2) + input_derivatives * theta_one_minus_theta)
    denominator = input_delta + ((input_derivatives + input_derivatives_plus_one - 2 * input_delta)
                                 * theta_one_minus_theta)
    outputs = input_cumheights + numerator / denominator
    derivative_numerator = input_delta.pow(2) * (input_derivatives_plus_one * theta.pow(2)
                                                 + 2 * input_delta * theta_one_minus_theta
                                                 + input_derivatives * (1 - theta).pow(2))
    logabsdet = torch.log(derivative_numerator) - 2 * torch.log(denominator)
    return outputs, logabsdet
class ResidualNet(nn.Module):
    def __init__(self, in_features, out_features, hidden_features, num_blocks=2):
        super().__init__()
        self.hidden_features = hidden_features
        self.initial_layer = nn.Linear(in_features, hidden_features)
        self.blocks = nn.ModuleList([nn.Sequential(nn.ReLU(), nn.Linear(hidden_features, hidden_features), nn.ReLU(),
                                                   nn.Linear(hidden_features, hidden_features))
                                     for _ in range(num_blocks)])
        self.final_layer = nn.Linear(hidden_features, out_features)
        for block in self.blocks:   # residual blocks start as the identity
            nn.init.uniform_(block[-1].weight, -1e-3, 1e-3); nn.init.uniform_(block[-1].bias, -1e-3, 1e-3)
    def forward(self, inputs):
        temps = self.initial_layer(inputs)
        for block in self.blocks:
            temps = temps + block(temps)
        return self.final_layer(temps)
class PiecewiseRationalQuadraticCouplingTransform(nn.Module):
    def __init__(self, mask, hidden_features, num_bins=8, tail_bound=3.0):
        super().__init__()
        mask = torch.as_tensor(mask)
        self.register_buffer('identity_features', mask.le(0).nonzero().view(-1))
        self.register_buffer('transform_features', mask.gt(0).nonzero().view(-1))
        self.num_bins, self.tail_bound = num_bins, tail_bound
        self.transform_net = ResidualNet(len(self.identity_features),
                                         len(self.transform_features) * (3 * num_bins - 1), hidden_features)
    def _coupling(self, inputs, inverse):
        identity_split = inputs[:, self.identity_features, ...]
        transform_split = inputs[:, self.transform_features, ...]
        transform_params = self.transform_net(identity_split)
        b, d = transform_split.shape
        transform_params = transform_params.view(b, d, self.num_bins * 3 - 1)
        unnormalized_widths = transform_params[..., :self.num_bins]
        unnormalized_heights = transform_params[..., self.num_bins:2 * self.num_bins]
        unnormalized_derivatives = transform_params[..., 2 * self.num_bins:]
        unnormalized_widths /= np.sqrt(self.transform_net.hidden_features)
        unnormalized_heights /= np.sqrt(self.transform_net.hidden_features)
        transform_split, logabsdet = unconstrained_rational_quadratic_spline(
            transform_split, unnormalized_widths, unnormalized_heights, unnormalized_derivatives,
            inverse=inverse, tail_bound=self.tail_bound)
        outputs = torch.empty_like(inputs)
        outputs[:, self.identity_features, ...] = identity_split
        outputs[:, self.transform_features, ...] = transform_split
        return outputs, logabsdet.sum(-1)
    def forward(self, inputs):
        return self._coupling(inputs, inverse=False)
    def inverse(self, inputs):
        return self._coupling(inputs, inverse=True)
class Flow(nn.Module):
    def __init__(self, features=4, num_layers=4, hidden_features=32):
        super().__init__()
        self.features = features
        self.layers = nn.ModuleList()
        for i in range(num_layers):
            mask = [1 if (j + i) % 2 else -1 for j in range(features)]
            self.layers.append(PiecewiseRationalQuadraticCouplingTransform(mask, hidden_features))
        self.register_buffer("perm", torch.tensor([1, 2, 3, 0]))
    def forward(self, inputs):   # log_prob
        total = inputs.new_zeros(inputs.shape[0])
        for layer in self.layers:
            inputs, logabsdet = layer(inputs)
            inputs = inputs[:, self.perm]
            total += logabsdet
        log_base = -0.5 * (inputs ** 2).sum(-1) - 0.5 * self.features * np.log(2 * np.pi)
        return log_base + total
    def sample_from(self, noise):
        x = noise
        for layer in reversed(self.layers):
            x = x[:, torch.argsort(self.perm)]
            x, _ = layer.inverse(x)
        return x
def make_data(rng, n):
    """Two moons in the first two features; a ring conditioned on them in the other two."""
    t = rng.uniform(0, np.pi, n); side = rng.integers(0, 2, n)
    x0 = np.where(side, np.cos(t), 1 - np.cos(t)); x1 = np.where(side, np.sin(t), 0.5 - np.sin(t))
    ang = rng.uniform(0, 2 * np.pi, n); r = 1.5 + 0.5 * x0
    x = np.stack([x0, x1, r * np.cos(ang), r * np.sin(ang)], 1) + 0.05 * rng.standard_normal((n, 4))
    return torch.from_numpy(x.astype(np.float32) * 1.5)
flow = Flow(); sync(flow)
log_prob, sample = comp(flow), comp(flow.sample_from)
optimizer = torch.optim.Adam(flow.parameters(), lr=2e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=8)
rng = np.random.default_rng(0)
LOSSES = []
for step in range(8):
    x = make_data(rng, 64)
    optimizer.zero_grad()
    loss = -log_prob(x).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(flow.parameters(), 5.0)
    optimizer.step(); scheduler.step()
    LOSSES.append(loss.item())
flow.eval()
with torch.no_grad():
    z = torch.from_numpy(rng.standard_normal((32, 4)).astype(np.float32))
    samples = sample(z)
    test_ll = log_prob(make_data(rng, 128)).mean()
    x = make_data(rng, 16)
    z_back = x
    for layer in flow.layers:
        z_back, _ = layer(z_back); z_back = z_back[:, flow.perm]
    roundtrip = (flow.sample_from(z_back) - x).abs().max()
LOSSES += [samples.abs().mean().item(), test_ll.item(), float(roundtrip.item() < 1e-3)]
