"""The models PyTorch users port, written once against PyTorch's API (torch or tracejit).

Four training workloads (the "models" workload of ``python -m bench`` and
``bench/bench_models.py``):

- ``cnn``: LeNet-style CNN with BatchNorm on 28x28 inputs, batch 64
  (conv 1->32 3x3, BN, ReLU, max-pool, conv 32->64 3x3, BN, ReLU, max-pool, linear 1600->10);
- ``lstm``: LSTM language-model step, batch 32, sequence 64, embedding and hidden 256,
  two layers, vocabulary 64, linear head;
- ``transformer``: one TransformerEncoderLayer step, batch 16, sequence 128, d_model 256,
  4 heads, feed-forward 1024, dropout 0;
- ``dcgan``: a DCGAN generator feeding its discriminator (pytorch/examples' layer pattern at
  32x32, width 32, batch 32): ConvTranspose2d 4x4 stride 2 + BatchNorm + ReLU(inplace) up
  from a 100-d code, Conv2d 4x4 stride 2 + BatchNorm + LeakyReLU(0.2, inplace) down, two
  logits. Transposed convolutions and in-place activations on convolution outputs are what
  the other three never exercise.

A step is forward, cross-entropy, backward and an SGD update. Every system starts from the
same parameters: each one is overwritten with `bench.workloads.model_param` by its
state_dict name, so the first losses agree across systems and are reported as a check.
"""
from __future__ import annotations

from .. import workloads as W
from .torchlike import train_step

MODELS = ("cnn", "lstm", "transformer", "dcgan")

# Per model: (input spec, target spec). The input spec is (shape, "float") for a float
# batch or (shape, vocabulary) for token ids; the target spec is (shape, classes).
SPECS = {"cnn": (((64, 1, 28, 28), "float"), ((64,), 10)),
         "lstm": (((32, 64), 64), ((32 * 64,), 64)),
         "transformer": (((16, 128, 256), "float"), ((16 * 128,), 10)),
         "dcgan": (((32, 100, 1, 1), "float"), ((32,), 2))}


def build(T, name: str):
    """(model, input spec, target spec) for model `name` written against module `T`."""
    nn = T.nn
    F = T.nn.functional
    if name == "cnn":
        class CNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32)
                self.c2, self.b2 = nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64)
                self.fc = nn.Linear(1600, 10)

            def forward(self, x):
                x = F.max_pool2d(T.relu(self.b1(self.c1(x))), 2)
                x = F.max_pool2d(T.relu(self.b2(self.c2(x))), 2)
                return self.fc(x.reshape(x.shape[0], -1))
        return CNN(), *SPECS[name]
    if name == "lstm":
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(64, 256)
                self.rnn = nn.LSTM(256, 256, num_layers=2, batch_first=True)
                self.head = nn.Linear(256, 64)

            def forward(self, tokens):
                out, _ = self.rnn(self.emb(tokens))
                return self.head(out).reshape(-1, 64)
        return LM(), *SPECS[name]
    if name == "transformer":
        class Enc(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
                self.head = nn.Linear(256, 10)

            def forward(self, x):
                return self.head(self.layer(x)).reshape(-1, 10)
        return Enc(), *SPECS[name]
    if name == "dcgan":
        g, d = 32, 32

        def up(cin, cout, first=False):
            return [nn.ConvTranspose2d(cin, cout, 4, 1 if first else 2, 0 if first else 1, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(True)]

        def down(cin, cout, bn=True):
            return ([nn.Conv2d(cin, cout, 4, 2, 1, bias=False)] + ([nn.BatchNorm2d(cout)] if bn else [])
                    + [nn.LeakyReLU(0.2, inplace=True)])

        class GD(nn.Module):
            def __init__(self):
                super().__init__()
                self.gen = nn.Sequential(*up(100, g * 4, True), *up(g * 4, g * 2), *up(g * 2, g),
                                         nn.ConvTranspose2d(g, 3, 4, 2, 1, bias=False), nn.Tanh())
                self.disc = nn.Sequential(*down(3, d, bn=False), *down(d, d * 2), *down(d * 2, d * 4),
                                          nn.Conv2d(d * 4, 2, 4, 1, 0, bias=False))

            def forward(self, z):
                return self.disc(self.gen(z)).reshape(-1, 2)
        return GD(), *SPECS[name]
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def load_shared_params(T, model, name: str) -> None:
    """Overwrite every parameter with the shared numpy init (same values in every system)."""
    with T.no_grad():
        for key, p in model.named_parameters():
            p.copy_(T.from_numpy(W.model_param(name, key, tuple(p.shape))))


def batch(T, name: str, xspec, tspec):
    """The one batch every step uses (numpy-drawn, identical across systems)."""
    x, y = W.model_batch(name, xspec, tspec)
    return T.from_numpy(x), T.from_numpy(y)


def model_step(T, compile, name: str, autocast=None):
    """(step, loss) for model `name`: `compile` wraps the model (identity when eager);
    `autocast` (a context factory) runs forward and loss under mixed precision."""
    if hasattr(T, "manual_seed"):
        T.manual_seed(0)
    net, xspec, tspec = build(T, name)
    load_shared_params(T, net, name)
    net.train()
    x, y = batch(T, name, xspec, tspec)
    opt = T.optim.SGD(net.parameters(), lr=0.01)
    fwd = compile(net)
    return train_step(opt, fwd, T.nn.functional.cross_entropy, x, y, autocast)


__all__ = ["MODELS", "SPECS", "build", "load_shared_params", "batch", "model_step"]
