"""Training steps written once for PyTorch's API, run by torch and by tracejit.

tracejit aims to be a drop-in for ``import torch``, so the two runners share this code:
``T`` is the framework module (``torch`` or ``tracejit``) and ``compile`` is the
runner's compile hook (identity in eager mode, ``torch.compile`` / ``tj.script``).
"""
from __future__ import annotations

from .. import workloads as W


def gelu_chain(T):
    def gelu(x, y, z):
        a = x * y + z
        return 0.5 * a * (1 + T.tanh(W.GELU_C * (a + W.GELU_K * a ** 3)))
    return gelu


def overhead_fn(T):
    def f(x, y, z):
        a = x * y + z
        return T.tanh(a) * a - z
    return f


def mlp2_step(T, compile, data: dict, tensor, other: dict | None = None):
    """The classic two-layer example: autograd for the gradients, SGD by hand.

    With `other` (data of another batch size) also returns a step on its x, y through the
    same compiled function (the compile probe's "new batch size")."""
    x, y = tensor(data["x"]), tensor(data["y"])
    w1, w2 = tensor(data["w1"], True), tensor(data["w2"], True)
    lr = W.MLP2_LR

    def loss_fn(x, y, w1, w2):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        return (y_pred - y).pow(2).sum()

    loss_fn = compile(loss_fn)
    last = {}

    def step(x=x, y=y):
        nonlocal w1, w2
        loss = loss_fn(x, y, w1, w2)
        loss.backward()
        with T.no_grad():
            w1 -= lr * w1.grad
            w2 -= lr * w2.grad
        w1.grad = None
        w2.grad = None
        last["loss"] = loss

    if other is not None:
        x2, y2 = tensor(other["x"]), tensor(other["y"])
        return step, lambda: float(last["loss"].item()), lambda: step(x2, y2)
    return step, lambda: float(last["loss"].item())


def _gelu_tanh(T):
    F = T.nn.functional
    if hasattr(F, "gelu"):
        return lambda h: F.gelu(h, approximate="tanh")
    return lambda h: T.gelu(h, approximate="tanh")


def make_mlp(T):
    nn = T.nn
    gelu = _gelu_tanh(T)
    d0, d1, d2, d3 = W.MLP_SIZES

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.n1 = nn.Linear(d0, d1), nn.LayerNorm(d1, eps=W.LN_EPS)
            self.l2, self.n2 = nn.Linear(d1, d2), nn.LayerNorm(d2, eps=W.LN_EPS)
            self.l3 = nn.Linear(d2, d3)

        def forward(self, x):
            h = gelu(self.n1(self.l1(x)))
            h = gelu(self.n2(self.l2(h)))
            return self.l3(h)

    return MLP()


def load_mlp(T, model, data: dict, tensor) -> None:
    """Overwrite the model's random init with the shared numpy init."""
    layers = {"w1": model.l1.weight, "b1": model.l1.bias, "g1": model.n1.weight,
              "be1": model.n1.bias, "w2": model.l2.weight, "b2": model.l2.bias,
              "g2": model.n2.weight, "be2": model.n2.bias, "w3": model.l3.weight,
              "b3": model.l3.bias}
    with T.no_grad():
        for k, p in layers.items():
            p.copy_(tensor(data[k]))


def mlp_step(T, compile, data: dict, tensor, labels_tensor, autocast=None):
    model = make_mlp(T)
    load_mlp(T, model, data, tensor)
    fwd = compile(model)
    F = T.nn.functional
    cross_entropy = F.cross_entropy if hasattr(F, "cross_entropy") else T.cross_entropy
    opt = T.optim.Adam(model.parameters(), lr=W.MLP_LR)
    x, labels = tensor(data["x"]), labels_tensor(data["labels"])
    return train_step(opt, fwd, cross_entropy, x, labels, autocast)


def train_step(opt, fwd, loss_fn, x, y, autocast=None):
    """(step, loss) for the usual training step: zero grads, forward, loss, backward,
    optimizer step; `loss()` reads the last step's loss as a float. With `autocast` (a
    context factory), the forward and the loss run under it, as PyTorch's recipe has it."""
    last = {}

    def step():
        opt.zero_grad()
        if autocast is not None:
            with autocast():
                loss = loss_fn(fwd(x), y)
        else:
            loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        last["loss"] = loss

    return step, lambda: float(last["loss"].item())
