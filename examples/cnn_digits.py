"""Classify scikit-learn's 8x8 handwritten digits with a small CNN.

Conv2d -> ReLU -> MaxPool2d twice, then Dropout and Linear; 1797 images
(``sklearn.datasets.load_digits``, bundled, no download), 20% held out. Prints the
held-out accuracy and exits non-zero if it is below ``THRESHOLD``. ``--compile``
runs the model through ``tracejit.script`` (forward and backward compiled).

Run:  pip install scikit-learn   (or: pip install -e '.[examples]')
      python examples/cnn_digits.py [--epochs N] [--seed S] [--compile]
"""
import argparse
import sys
import time

import numpy as np

import tracejit as tj
from tracejit import nn, optim
from tracejit.data import DataLoader, TensorDataset

THRESHOLD = 0.95


def load(seed: int):
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        print("cnn_digits needs scikit-learn for its bundled dataset:\n"
              "    pip install scikit-learn      (or: pip install -e '.[examples]')")
        sys.exit(0)
    X, y = load_digits(return_X_y=True)
    X = (X.astype(np.float32) / 16.0 - 0.5).reshape(-1, 1, 8, 8)  # pixels are 0..16
    order = np.random.default_rng(seed).permutation(len(X))
    n_test = len(X) // 5
    test, train = order[:n_test], order[n_test:]
    return (tj.tensor(X[train]), tj.tensor(y[train])), (tj.tensor(X[test]), tj.tensor(y[test]))


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),   # 16 x 4 x 4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),  # 32 x 2 x 2
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 2 * 2, 10),
    )


def accuracy(forward, model, X, y) -> float:
    model.eval()
    with tj.no_grad():
        pred = forward(X).argmax(dim=1)
    model.train()
    return (pred == y).float().mean().item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="run the model through tracejit.script")
    args = ap.parse_args(argv)

    (X_train, y_train), (X_test, y_test) = load(args.seed)
    tj.manual_seed(args.seed)
    model = make_model()
    forward = tj.script(model) if args.compile else model
    print(model)
    # drop_last: every training batch has one shape, so --compile compiles it once
    loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32, shuffle=True, drop_last=True)
    opt = optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        total, n = 0.0, 0
        for xb, yb in loader:
            loss = loss_fn(forward(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            n += len(xb)
        if epoch % 5 == 0 or epoch == 1:
            print(f"epoch {epoch:3d}  train loss {total / n:.4f}  "
                  f"test accuracy {accuracy(forward, model, X_test, y_test):.4f}")
    elapsed = time.perf_counter() - t0

    acc = accuracy(forward, model, X_test, y_test)
    print(f"held-out accuracy: {acc:.4f} on {len(y_test)} images ({len(y_train)} training images, "
          f"{args.epochs} epochs, {elapsed:.1f} s{', compiled' if args.compile else ''})")
    if acc < THRESHOLD:
        print(f"FAIL: accuracy {acc:.4f} is below the threshold {THRESHOLD}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
