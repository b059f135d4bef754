from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)

# JEM (Grathwohl et al. 2020), the reference repo's loop at toy size: a classifier's
# logsumexp is an energy, samples come from SGLD (gradients of the energy with respect to
# the input by torch.autograd.grad) started from a replay buffer, and the loss is cross
# entropy plus the contrastive energy difference.
class F_(nn.Module):
    def __init__(self, n_cls=4):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(8, 8, 3, stride=2, padding=1),
                               nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.class_output = nn.Linear(8, n_cls)
    def forward(self, x, y=None):
        logits = self.class_output(self.f(x))
        return logits.logsumexp(1) if y is None else torch.gather(logits, 1, y[:, None])
    def classify(self, x):
        return self.class_output(self.f(x))

rng = np.random.default_rng(0)
f32 = lambda a: torch.from_numpy(np.asarray(a, np.float32))
model = F_(); sync(model)
energy = comp(model)
classify = comp(model.classify)
replay_buffer = f32(rng.uniform(-1, 1, (20, 1, 8, 8)))

def sample_p_0(bs, reinit_freq=0.05):
    inds = torch.from_numpy(rng.integers(0, replay_buffer.size(0), bs))
    buffer_samples = replay_buffer[inds]
    random_samples = f32(rng.uniform(-1, 1, (bs, 1, 8, 8)))
    choose_random = f32(rng.random(bs) < reinit_freq)[:, None, None, None]
    return choose_random * random_samples + (1 - choose_random) * buffer_samples, inds

def sample_q(bs, n_steps=5, sgld_lr=1.0, sgld_std=0.01):
    model.eval()
    init_sample, buffer_inds = sample_p_0(bs)
    x_k = torch.autograd.Variable(init_sample, requires_grad=True)
    for k in range(n_steps):
        f_prime = torch.autograd.grad(energy(x_k).sum(), [x_k], retain_graph=True)[0]
        x_k.data += sgld_lr * f_prime + sgld_std * f32(rng.standard_normal(x_k.shape))
    model.train()
    final_samples = x_k.detach()
    replay_buffer[buffer_inds] = final_samples
    return final_samples

opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.999))
LOSSES = []
for step in range(4):
    x_lab = f32(rng.standard_normal((6, 1, 8, 8))); y_lab = torch.from_numpy(rng.integers(0, 4, 6))
    x_p_d = f32(rng.standard_normal((6, 1, 8, 8)))
    x_q = sample_q(6)
    fp, fq = energy(x_p_d).mean(), energy(x_q).mean()
    l_p_x = -(fp - fq)
    l_p_y_given_x = F.cross_entropy(classify(x_lab), y_lab)
    loss = l_p_x + l_p_y_given_x
    opt.zero_grad(); loss.backward(); opt.step()
    LOSSES += [loss.item(), (fp - fq).item(), x_q.abs().mean().item()]
LOSSES.append(replay_buffer.sum().item())
