from _harness import comp, sync  # the runner: shared weights, torch.compile or not
from copy import deepcopy
import numpy as np, torch, torch.nn as nn
torch.manual_seed(0)
# SuperGlue as magicleap/SuperGluePretrainedNetwork writes it: keypoints normalized by the
# image size (new_tensor, stack), a keypoint encoder MLP of 1x1 Conv1d + BatchNorm1d,
# self/cross attentional GNN layers (einsum attention over (b, d, h, n) views, deepcopy'd
# projections), a learnable dustbin score registered as a parameter, log-domain Sinkhorn
# (logsumexp iterations over couplings with a dustbin row and column built by cat and
# expand, marginals from m and n) and mutual-nearest matching by max, gather and where;
# trained on synthetic pairs of different keypoint counts (compiled with dynamic=True and
# fullgraph=True) by the negative log-likelihood of the ground-truth matches and unmatched
# dustbin entries under SGD with momentum
def MLP(channels: list, do_bn=True):
    """ Multi-layer perceptron """
    n = len(channels)
    layers = []
    for i in range(1, n):
        layers.append(nn.Conv1d(channels[i - 1], channels[i], kernel_size=1, bias=True))
        if i < (n-1):
            if do_bn:
                layers.append(nn.BatchNorm1d(channels[i]))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)
def normalize_keypoints(kpts, image_shape):
    """ Normalize keypoints locations based on image image_shape"""
    _, _, height, width = image_shape
    one = kpts.new_tensor(1)
    size = torch.stack([one*width, one*height])[None]
    center = size / 2
    scaling = size.max(1, keepdim=True).values * 0.7
    return (kpts - center[:, None, :]) / scaling[:, None, :]
class KeypointEncoder(nn.Module):
    """ Joint encoding of visual appearance and location using MLPs"""
    def __init__(self, feature_dim, layers):
        super().__init__()
        self.encoder = MLP([3] + layers + [feature_dim])
        nn.init.constant_(self.encoder[-1].bias, 0.0)
    def forward(self, kpts, scores):
        inputs = [kpts.transpose(1, 2), scores.unsqueeze(1)]
        return self.encoder(torch.cat(inputs, dim=1))
def attention(query, key, value):
    dim = query.shape[1]
    scores = torch.einsum('bdhn,bdhm->bhnm', query, key) / dim**.5
    prob = torch.nn.functional.softmax(scores, dim=-1)
    return torch.einsum('bhnm,bdhm->bdhn', prob, value), prob
class MultiHeadedAttention(nn.Module):
    """ Multi-head attention to increase model expressivitiy """
    def __init__(self, num_heads: int, d_model: int):
        super().__init__()
        assert d_model % num_heads == 0
        self.dim = d_model // num_heads
        self.num_heads = num_heads
        self.merge = nn.Conv1d(d_model, d_model, kernel_size=1)
        self.proj = nn.ModuleList([deepcopy(self.merge) for _ in range(3)])
    def forward(self, query, key, value):
        batch_dim = query.size(0)
        query, key, value = [l(x).view(batch_dim, self.dim, self.num_heads, -1)
                             for l, x in zip(self.proj, (query, key, value))]
        x, _ = attention(query, key, value)
        return self.merge(x.contiguous().view(batch_dim, self.dim*self.num_heads, -1))
class AttentionalPropagation(nn.Module):
    def __init__(self, feature_dim: int, num_heads: int):
        super().__init__()
        self.attn = MultiHeadedAttention(num_heads, feature_dim)
        self.mlp = MLP([feature_dim*2, feature_dim*2, feature_dim])
        nn.init.constant_(self.mlp[-1].bias, 0.0)
    def forward(self, x, source):
        message = self.attn(x, source, source)
        return self.mlp(torch.cat([x, message], dim=1))
class AttentionalGNN(nn.Module):
    def __init__(self, feature_dim: int, layer_names: list):
        super().__init__()
        self.layers = nn.ModuleList([
            AttentionalPropagation(feature_dim, 4)
            for _ in range(len(layer_names))])
        self.names = layer_names
    def forward(self, desc0, desc1):
        for layer, name in zip(self.layers, self.names):
            if name == 'cross':
                src0, src1 = desc1, desc0
            else:  # if name == 'self':
                src0, src1 = desc0, desc1
            delta0, delta1 = layer(desc0, src0), layer(desc1, src1)
            desc0, desc1 = (desc0 + delta0), (desc1 + delta1)
        return desc0, desc1
def log_sinkhorn_iterations(Z, log_mu, log_nu, iters: int):
    """ Perform Sinkhorn Normalization in Log-space for stability"""
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(iters):
        u = log_mu - torch.logsumexp(Z + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(Z + u.unsqueeze(2), dim=1)
    return Z + u.unsqueeze(2) + v.unsqueeze(1)
def log_optimal_transport(scores, alpha, iters: int):
    """ Perform Differentiable Optimal Transport in Log-space for stability"""
    b, m, n = scores.shape
    one = scores.new_tensor(1)
    ms, ns = (m*one).to(scores), (n*one).to(scores)
    bins0 = alpha.expand(b, m, 1)
    bins1 = alpha.expand(b, 1, n)
    alpha = alpha.expand(b, 1, 1)
    couplings = torch.cat([torch.cat([scores, bins0], -1),
                           torch.cat([bins1, alpha], -1)], 1)
    norm = - (ms + ns).log()
    log_mu = torch.cat([norm.expand(m), ns.log()[None] + norm])
    log_nu = torch.cat([norm.expand(n), ms.log()[None] + norm])
    log_mu, log_nu = log_mu[None].expand(b, -1), log_nu[None].expand(b, -1)
    Z = log_sinkhorn_iterations(couplings, log_mu, log_nu, iters)
    Z = Z - norm  # multiply probabilities by M+N
    return Z
def arange_like(x, dim: int):
    return x.new_ones(x.shape[dim]).cumsum(0) - 1  # traceable in 1.1
class SuperGlue(nn.Module):
    default_config = {'descriptor_dim': 16, 'keypoint_encoder': [8, 16], 'GNN_layers': ['self', 'cross'],
                      'sinkhorn_iterations': 10, 'match_threshold': 0.2}
    def __init__(self, config={}):
        super().__init__()
        self.config = {**self.default_config, **config}
        self.kenc = KeypointEncoder(self.config['descriptor_dim'], self.config['keypoint_encoder'])
        self.gnn = AttentionalGNN(feature_dim=self.config['descriptor_dim'], layer_names=self.config['GNN_layers'])
        self.final_proj = nn.Conv1d(self.config['descriptor_dim'], self.config['descriptor_dim'], kernel_size=1, bias=True)
        bin_score = torch.nn.Parameter(torch.tensor(1.))
        self.register_parameter('bin_score', bin_score)
    def forward(self, data):
        desc0, desc1 = data['descriptors0'], data['descriptors1']
        kpts0, kpts1 = data['keypoints0'], data['keypoints1']
        # Keypoint normalization.
        kpts0 = normalize_keypoints(kpts0, data['image0'].shape)
        kpts1 = normalize_keypoints(kpts1, data['image1'].shape)
        # Keypoint MLP encoder.
        desc0 = desc0 + self.kenc(kpts0, data['scores0'])
        desc1 = desc1 + self.kenc(kpts1, data['scores1'])
        # Multi-layer Transformer network.
        desc0, desc1 = self.gnn(desc0, desc1)
        # Final MLP projection.
        mdesc0, mdesc1 = self.final_proj(desc0), self.final_proj(desc1)
        # Compute matching descriptor distance.
        scores = torch.einsum('bdn,bdm->bnm', mdesc0, mdesc1)
        scores = scores / self.config['descriptor_dim']**.5
        # Run the optimal transport.
        scores = log_optimal_transport(scores, self.bin_score, iters=self.config['sinkhorn_iterations'])
        # Get the matches with score above "match_threshold".
        max0, max1 = scores[:, :-1, :-1].max(2), scores[:, :-1, :-1].max(1)
        indices0, indices1 = max0.indices, max1.indices
        mutual0 = arange_like(indices0, 1)[None] == indices1.gather(1, indices0)
        mutual1 = arange_like(indices1, 1)[None] == indices0.gather(1, indices1)
        zero = scores.new_tensor(0)
        mscores0 = torch.where(mutual0, max0.values.exp(), zero)
        mscores1 = torch.where(mutual1, mscores0.gather(1, indices1), zero)
        valid0 = mutual0 & (mscores0 > self.config['match_threshold'])
        valid1 = mutual1 & valid0.gather(1, indices1)
        indices0 = torch.where(valid0, indices0, indices0.new_tensor(-1))
        indices1 = torch.where(valid1, indices1, indices1.new_tensor(-1))
        return {'matches0': indices0, 'matches1': indices1, 'matching_scores0': mscores0,
                'matching_scores1': mscores1, 'scores': scores}
def make_pair(r, n0, n1, n_match, dim=16, size=64):
    """Two views of a keypoint set (a rotation and shift), n_match of them shared, descriptors noisy copies."""
    k0 = r.uniform(0, size, (n0, 2))
    theta, shift = r.uniform(-0.3, 0.3), r.uniform(-4, 4, 2)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    perm = r.permutation(n1)
    k1 = r.uniform(0, size, (n1, 2))
    d0 = r.standard_normal((dim, n0))
    d1 = r.standard_normal((dim, n1))
    gt0 = np.full(n0, n1)    # the dustbin
    gt1 = np.full(n1, n0)
    for i in range(n_match):
        j = perm[i]
        k1[j] = (k0[i] - size / 2) @ rot.T + size / 2 + shift
        d1[:, j] = d0[:, i] + 0.3 * r.standard_normal(dim)
        gt0[i], gt1[j] = j, i
    f = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float32))
    data = {'keypoints0': f(k0)[None], 'keypoints1': f(k1)[None], 'descriptors0': f(d0)[None],
            'descriptors1': f(d1)[None], 'scores0': f(r.uniform(0.2, 1, n0))[None],
            'scores1': f(r.uniform(0.2, 1, n1))[None], 'image0': torch.zeros(1, 1, size, size),
            'image1': torch.zeros(1, 1, size, size)}
    return data, torch.from_numpy(gt0), torch.from_numpy(gt1)
superglue = SuperGlue()
sync(superglue)
matcher = comp(superglue, dynamic=True, fullgraph=True)
# (SGD: Adam would blow the float noise in the gradients of biases before BatchNorm, zero
# in exact arithmetic, up to full steps)
optimizer = torch.optim.SGD(superglue.parameters(), lr=0.05, momentum=0.9)
r = np.random.default_rng(0)
LOSSES = []
for step, (n0, n1) in enumerate([(12, 10), (9, 14)]):
    data, gt0, gt1 = make_pair(r, n0, n1, n_match=6)
    pred = matcher(data)
    Z = pred['scores'][0]
    matched = gt0 < n1
    loss = -(Z[torch.arange(n0), gt0][matched].sum() + Z[torch.arange(n0)[~matched], n1].sum()
             + Z[n0, torch.arange(n1)[gt1 == n0]].sum()) / (n0 + n1)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    correct = (pred['matches0'][0] == torch.where(matched, gt0, -1)).float().mean()
    LOSSES += [loss.item(), correct.item(), superglue.bin_score.item()]
superglue.eval()
with torch.no_grad():
    data, gt0, gt1 = make_pair(r, 11, 13, n_match=7)
    pred = matcher(data)
    LOSSES += pred['matches0'][0].tolist() + pred['matches1'][0].tolist()
    LOSSES += pred['matching_scores0'][0].tolist() + pred['scores'][0, -1].tolist()
