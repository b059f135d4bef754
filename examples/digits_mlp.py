"""Classify scikit-learn's bundled 8x8 handwritten digits with an MLP.

Uses ``sklearn.datasets.load_digits`` (shipped with scikit-learn, no download):
1797 images, 10 classes. 20% are held out for testing; the script prints the
held-out accuracy and exits non-zero if it is below ``THRESHOLD``.

Run:  pip install scikit-learn   (or: pip install -e '.[examples]')
      python examples/digits_mlp.py [--epochs N] [--seed S]
"""
import argparse
import sys
import time

import numpy as np

import tracejit as tj
from tracejit import nn, optim
from tracejit.data import DataLoader, TensorDataset

# Measured with the defaults: 98.1% for seed 0, 96.4-98.3% over seeds 0-4.
THRESHOLD = 0.95


def load(seed: int):
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        print("digits_mlp needs scikit-learn for its bundled dataset:\n"
              "    pip install scikit-learn      (or: pip install -e '.[examples]')")
        sys.exit(0)
    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(X))
    n_test = len(X) // 5
    test, train = order[:n_test], order[n_test:]
    # Standardise each pixel with training-set statistics (+0.1 keeps always-blank pixels finite).
    mu, sd = X[train].mean(0), X[train].std(0) + 0.1
    X = (X - mu) / sd
    return (tj.tensor(X[train]), tj.tensor(y[train])), (tj.tensor(X[test]), tj.tensor(y[test]))


def accuracy(model, X, y) -> float:
    model.eval()
    with tj.no_grad():
        pred = model(X).argmax(dim=1)
    model.train()
    return (pred == y).float().mean().item()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    (X_train, y_train), (X_test, y_test) = load(args.seed)
    tj.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(128, 10),
    )
    print(model)
    loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32, shuffle=True)
    opt = optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    loss_fn = nn.CrossEntropyLoss()

    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        total, n = 0.0, 0
        for xb, yb in loader:
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            n += len(xb)
        sched.step()
        if epoch % 5 == 0 or epoch == 1:
            print(f"epoch {epoch:3d}  train loss {total / n:.4f}  "
                  f"test accuracy {accuracy(model, X_test, y_test):.4f}")
    elapsed = time.perf_counter() - t0

    acc = accuracy(model, X_test, y_test)
    print(f"held-out accuracy: {acc:.4f} on {len(y_test)} images "
          f"({len(y_train)} training images, {args.epochs} epochs, {elapsed:.1f} s)")
    if acc < THRESHOLD:
        print(f"FAIL: accuracy {acc:.4f} is below the threshold {THRESHOLD}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
