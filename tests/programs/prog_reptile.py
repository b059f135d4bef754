from _harness import comp, sync  # the runner: shared weights, torch.compile or not
import numpy as np, torch, torch.nn as nn
from copy import deepcopy
torch.manual_seed(0)
# Reptile on sine-wave regression as OpenAI's reptile-sinewaves demo writes it: a tanh MLP,
# inner SGD written by hand (param.data -= innerstepsize * param.grad.data after
# model.zero_grad()), minibatches over a shuffled task, weights_before =
# deepcopy(model.state_dict()), the outer step by load_state_dict of a dict comprehension
# moving toward the adapted weights with a linearly annealed step size; then the demo's
# evaluation: the meta-learned model fine-tuned on 10 points of a new task for 32 inner
# steps (its error tracked), then restored from a state_dict snapshot
seed = 0
plot = False
innerstepsize = 0.02  # stepsize in inner SGD
innerepochs = 1  # number of epochs of each inner SGD
outerstepsize0 = 0.1  # stepsize of outer optimization, i.e., meta-optimization
niterations = 6  # number of outer updates; each iteration we sample one task and update on it
rng = np.random.RandomState(seed)
x_all = np.linspace(-5, 5, 50)[:, None]  # All of the x points
ntrain = 10  # Size of training minibatches
def gen_task():
    "Generate classification problem"
    phase = rng.uniform(low=0, high=2 * np.pi)
    ampl = rng.uniform(0.1, 5)
    f_randomsine = lambda x: np.sin(x + phase) * ampl
    return f_randomsine
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
sync(model)
fwd = comp(model)
def totorch(x):
    return torch.tensor(x, dtype=torch.float32)
def train_on_batch(x, y):
    x = totorch(x)
    y = totorch(y)
    model.zero_grad()
    ypred = fwd(x)
    loss = (ypred - y).pow(2).mean()
    loss.backward()
    for param in model.parameters():
        param.data -= innerstepsize * param.grad.data
    return loss
def predict(x):
    x = totorch(x)
    return fwd(x).data.numpy()
f_plot = gen_task()
xtrain_plot = x_all[rng.choice(len(x_all), size=ntrain)]
LOSSES = []
for iteration in range(niterations):
    weights_before = deepcopy(model.state_dict())
    f = gen_task()
    y_all = f(x_all)
    inds = rng.permutation(len(x_all))
    for _ in range(innerepochs):
        for start in range(0, len(x_all), ntrain):
            mbinds = inds[start:start + ntrain]
            loss = train_on_batch(x_all[mbinds], y_all[mbinds])
    weights_after = model.state_dict()
    outerstepsize = outerstepsize0 * (1 - iteration / niterations)  # linear schedule
    model.load_state_dict({name: weights_before[name] + (weights_after[name] - weights_before[name]) * outerstepsize
                           for name in weights_before})
    LOSSES.append(loss.item())
weights_before = deepcopy(model.state_dict())  # save snapshot before evaluation
for inneriter in range(32):
    train_on_batch(xtrain_plot, f_plot(xtrain_plot))
    if (inneriter + 1) % 8 == 0:
        LOSSES.append(float(np.square(predict(x_all) - f_plot(x_all)).mean()))
model.load_state_dict(weights_before)  # restore from snapshot
LOSSES.append(float(np.square(predict(x_all) - f_plot(x_all)).mean()))
