from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import copy, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.func import functional_call, vmap, grad, jacrev, stack_module_state
torch.manual_seed(0)
# the torch.func tutorials: per-sample gradients by vmap(grad(functional_call)) checked
# against a loop, DP-SGD steps on them (per-sample clipping, Gaussian noise drawn by
# numpy), a model ensemble by stack_module_state over a copied base model, trained with
# vmapped gradients, and a Jacobian by jacrev; compiled: the model the loop calls
class SimpleCNN(nn.Module):
    def __init__(self):
        super(SimpleCNN, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)
    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output
def loss_fn(predictions, targets):
    return F.nll_loss(predictions, targets)
r = np.random.default_rng(0)
model = SimpleCNN(); sync(model)
cmodel = comp(model)
batch_size = 8
data = torch.from_numpy(r.standard_normal((batch_size, 1, 8, 8)).astype(np.float32))
targets = torch.from_numpy(r.integers(0, 10, batch_size))
def compute_grad(sample, target):
    sample = sample.unsqueeze(0)
    target = target.unsqueeze(0)
    prediction = cmodel(sample)
    loss = loss_fn(prediction, target)
    return torch.autograd.grad(loss, list(model.parameters()))
def compute_sample_grads(data, targets):
    sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
    sample_grads = zip(*sample_grads)
    sample_grads = [torch.stack(shards) for shards in sample_grads]
    return sample_grads
per_sample_grads = compute_sample_grads(data, targets)
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}
def compute_loss(params, buffers, sample, target):
    batch = sample.unsqueeze(0)
    targets = target.unsqueeze(0)
    predictions = functional_call(model, (params, buffers), (batch,))
    loss = loss_fn(predictions, targets)
    return loss
ft_compute_grad = grad(compute_loss)
ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
ft_per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)
LOSSES = []
for per_sample_grad, ft_per_sample_grad in zip(per_sample_grads, ft_per_sample_grads.values()):
    assert per_sample_grad.shape == ft_per_sample_grad.shape
    LOSSES.append(float(torch.allclose(per_sample_grad, ft_per_sample_grad, atol=3e-3, rtol=1e-5)))
    LOSSES.append(ft_per_sample_grad.pow(2).sum().item())
# DP-SGD: clip each sample's gradient to norm C, sum, add noise, average
C, sigma, lr = 1.0, 0.5, 0.1
for step in range(3):
    x = torch.from_numpy(r.standard_normal((batch_size, 1, 8, 8)).astype(np.float32))
    y = torch.from_numpy(r.integers(0, 10, batch_size))
    g = ft_compute_sample_grad(params, buffers, x, y)
    norms = torch.stack([v.reshape(batch_size, -1).norm(dim=1) for v in g.values()], dim=1).norm(dim=1)
    factor = (C / (norms + 1e-6)).clamp(max=1.0)
    with torch.no_grad():
        for k in params:
            clipped = torch.einsum("i,i...->...", factor, g[k])
            noise = torch.from_numpy(r.standard_normal(tuple(params[k].shape)).astype(np.float32)) * sigma * C
            params[k] = params[k] - lr * (clipped + noise) / batch_size
    LOSSES += [norms.mean().item(), compute_loss(params, buffers, x[0], y[0]).item()]
# ensembling: stacked weights of several models, one vmapped call
class MLP(nn.Module):
    def __init__(self):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)
    def forward(self, x):
        x = x.flatten(1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        x = F.relu(x)
        x = self.fc3(x)
        return x
num_models = 5
models = [MLP() for _ in range(num_models)]; sync(*models)
minibatches = torch.from_numpy(r.standard_normal((num_models, 6, 16)).astype(np.float32))
minibatch = minibatches[0]
predictions_diff_minibatch_loop = [model(minibatch) for model, minibatch in zip(models, minibatches)]
params, buffers = stack_module_state(models)
base_model = copy.deepcopy(models[0])
def fmodel(params, buffers, x):
    return functional_call(base_model, (params, buffers), (x,))
predictions1_vmap = vmap(fmodel)(params, buffers, minibatches)
predictions2_vmap = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
LOSSES.append(float(torch.allclose(predictions1_vmap, torch.stack(predictions_diff_minibatch_loop), atol=1e-6, rtol=1e-6)))
LOSSES += [predictions1_vmap.pow(2).mean().item(), predictions2_vmap.abs().mean().item()]
# train the ensemble: each member on its own minibatch, one vmapped gradient per step
labels = torch.from_numpy(r.integers(0, 4, (num_models, 6)))
def ensemble_loss(p, b, x, t):
    return F.cross_entropy(fmodel(p, b, x), t)
ens_grad = vmap(grad(ensemble_loss), in_dims=(0, 0, 0, 0))
opt = torch.optim.Adam(params.values(), lr=1e-2)
for step in range(3):
    gs = ens_grad(params, buffers, minibatches, labels)
    for k, p in params.items():
        p.grad = gs[k]
    opt.step()
    LOSSES.append(vmap(ensemble_loss)(params, buffers, minibatches, labels).sum().item())
# the Jacobian of one member's outputs with respect to its input
jac = jacrev(fmodel, argnums=2)({k: v[0] for k, v in params.items()}, {}, minibatch[:2])
assert jac.shape == (2, 4, 2, 16)
LOSSES.append(jac.abs().sum().item())
