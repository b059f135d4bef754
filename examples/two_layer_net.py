"""The classic two-layer network from PyTorch's "learning by examples" tutorial, in three styles.

A fully-connected ReLU network with one hidden layer, trained to predict y from x
by minimising squared Euclidean distance:

1. tensors and autograd, weights updated by hand under ``no_grad``;
2. the same network as an ``nn.Module`` with ``optim.SGD``;
3. ``nn.Sequential`` with ``optim.Adam``.

Run:  python examples/two_layer_net.py
"""
import time

import tracejit as tj
from tracejit import nn, optim

N, D_in, H, D_out = 64, 1000, 100, 10


def data():
    tj.manual_seed(0)
    return tj.randn(N, D_in), tj.randn(N, D_out)


def by_hand(steps: int = 500, learning_rate: float = 1e-6) -> float:
    x, y = data()
    w1 = tj.randn(D_in, H, requires_grad=True)
    w2 = tj.randn(H, D_out, requires_grad=True)
    for t in range(steps):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        if t % 100 == 99:
            print(f"  step {t + 1:4d}  loss {loss.item():.6g}")
        loss.backward()
        with tj.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return loss.item()


class TwoLayerNet(nn.Module):
    def __init__(self, D_in: int, H: int, D_out: int):
        super().__init__()
        self.linear1 = nn.Linear(D_in, H)
        self.linear2 = nn.Linear(H, D_out)

    def forward(self, x):
        return self.linear2(self.linear1(x).clamp(min=0))


def with_modules(model, optimizer_cls, steps: int = 500, **opt_kw) -> float:
    x, y = data()
    loss_fn = nn.MSELoss(reduction="sum")
    opt = optimizer_cls(model.parameters(), **opt_kw)
    for t in range(steps):
        loss = loss_fn(model(x), y)
        if t % 100 == 99:
            print(f"  step {t + 1:4d}  loss {loss.item():.6g}")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def main():
    runs = [
        ("1. tensors + autograd, manual update", lambda: by_hand()),
        ("2. nn.Module + SGD", lambda: with_modules(TwoLayerNet(D_in, H, D_out), optim.SGD, lr=1e-4)),
        ("3. nn.Sequential + Adam", lambda: with_modules(
            nn.Sequential(nn.Linear(D_in, H), nn.ReLU(), nn.Linear(H, D_out)), optim.Adam, lr=1e-4)),
    ]
    for title, run in runs:
        print(title)
        t0 = time.perf_counter()
        final = run()
        dt = time.perf_counter() - t0
        print(f"  final loss {final:.6g}  ({dt * 1e3 / 500:.2f} ms/step)")


if __name__ == "__main__":
    main()
