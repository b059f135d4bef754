from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
# A spiking network trained with surrogate gradients as snntorch's tutorials and Zenke's
# SpyTorch write it: a custom autograd.Function (Heaviside forward, fast-sigmoid surrogate
# in backward, ctx.save_for_backward), leaky integrate-and-fire layers unrolled over time in
# a Python loop with reset by subtraction (the reset detached, as snntorch does), rate-coded
# inputs by torch.bernoulli, membrane and spike records stacked, a spike-count cross-entropy
# plus a membrane regularizer, accuracy by the spike count's argmax. The inputs are binary
# images, so the Bernoulli rate code is fixed whichever generator draws it
NUM_INPUTS, NUM_HIDDEN, NUM_OUTPUTS, NUM_STEPS, BATCH = 36, 48, 4, 12, 16


class SurrGradSpike(torch.autograd.Function):
    scale = 5.0

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        out = torch.zeros_like(input)
        out[input > 0] = 1.0
        return out

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = grad_input / (SurrGradSpike.scale * torch.abs(input) + 1.0) ** 2
        return grad


spike_grad = SurrGradSpike.apply


class Leaky(nn.Module):
    def __init__(self, beta, threshold=1.0, learn_beta=False):
        super().__init__()
        beta = torch.as_tensor(beta)
        if learn_beta:
            self.beta = nn.Parameter(beta)
        else:
            self.register_buffer("beta", beta)
        self.threshold = threshold

    def init_leaky(self):
        return torch.zeros(0)     # snntorch's lazy state: broadcast on the first step

    def fire(self, mem):
        return spike_grad(mem - self.threshold)

    def forward(self, input_, mem):
        if mem.numel() == 0:
            mem = torch.zeros_like(input_)
        reset = self.fire(mem).detach()            # reset by subtraction, detached
        mem = self.beta.clamp(0, 1) * mem + input_ - reset * self.threshold
        spk = self.fire(mem)
        return spk, mem


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(NUM_INPUTS, NUM_HIDDEN)
        self.lif1 = Leaky(beta=0.9, learn_beta=True)
        self.fc2 = nn.Linear(NUM_HIDDEN, NUM_OUTPUTS)
        self.lif2 = Leaky(beta=0.8)

    def forward(self, x):               # x: [time, batch, inputs] spike trains
        mem1 = self.lif1.init_leaky()
        mem2 = self.lif2.init_leaky()
        spk2_rec, mem2_rec = [], []
        for step in range(x.size(0)):
            cur1 = self.fc1(x[step])
            spk1, mem1 = self.lif1(cur1, mem1)
            cur2 = self.fc2(spk1)
            spk2, mem2 = self.lif2(cur2, mem2)
            spk2_rec.append(spk2)
            mem2_rec.append(mem2)
        return torch.stack(spk2_rec, dim=0), torch.stack(mem2_rec, dim=0)


def rate(data, num_steps):      # snntorch.spikegen.rate
    time_data = data.repeat(tuple([num_steps] + [1] * data.dim()))
    return torch.bernoulli(time_data)


def batch(rng):
    """Binary 6x6 images of four bar orientations with flipped pixels."""
    y = rng.integers(0, NUM_OUTPUTS, BATCH)
    img = np.zeros((BATCH, 6, 6), np.float32)
    for i, c in enumerate(y):
        if c == 0: img[i, 2:4, :] = 1
        elif c == 1: img[i, :, 2:4] = 1
        elif c == 2: img[i][np.eye(6, dtype=bool)] = 1
        else: img[i][np.eye(6, dtype=bool)[::-1]] = 1
    flip = rng.random(img.shape) < 0.1
    img[flip] = 1 - img[flip]
    return torch.from_numpy(img.reshape(BATCH, -1)), torch.from_numpy(y)


net = Net()
with torch.no_grad():            # weights scaled so that spikes start flowing
    net.fc1.weight.mul_(3.0)
    net.fc2.weight.mul_(4.0)
sync(net)
model = comp(net)
optimizer = torch.optim.Adam(net.parameters(), lr=5e-3, betas=(0.9, 0.999))
loss_fn = nn.CrossEntropyLoss()
rng = np.random.default_rng(0)
LOSSES = []
for it in range(6):
    data, targets = batch(rng)
    spk_rec, mem_rec = model(rate(data, NUM_STEPS))
    loss_val = loss_fn(spk_rec.sum(0), targets)          # spike-count cross-entropy
    loss_val = loss_val + 1e-3 * (mem_rec ** 2).mean()   # a membrane regularizer
    optimizer.zero_grad()
    loss_val.backward()
    optimizer.step()
    acc = (spk_rec.sum(dim=0).argmax(1) == targets).float().mean()
    LOSSES += [loss_val.item(), acc.item(), spk_rec.sum().item()]
LOSSES.append(net.lif1.beta.item())
with torch.no_grad():
    net.eval()
    data, targets = batch(rng)
    spk_rec, mem_rec = model(rate(data, NUM_STEPS))
    LOSSES += [spk_rec.sum().item(), mem_rec[-1].abs().sum().item()]
    # rate code of grey inputs on the generator's own draws: only its bounds are fixed
    s = rate(torch.full((64, NUM_INPUTS), 0.25), NUM_STEPS).mean().item()
    LOSSES.append(float(0.2 < s < 0.3))
