"""Training steps of the models PyTorch users port: tracejit eager and compiled vs PyTorch eager.

    python bench/bench_models.py                     # all models, all systems present
    python bench/bench_models.py --models lstm --steps 20

Workloads (issue "The models PyTorch users write"):
- ``cnn``: LeNet-style CNN with BatchNorm on 28x28 inputs, batch 64
  (conv 1->32 3x3, BN, ReLU, max-pool, conv 32->64 3x3, BN, ReLU, max-pool, linear 1600->10);
- ``lstm``: LSTM language-model step, batch 32, sequence 64, embedding and hidden 256,
  two layers, vocabulary 64, linear head;
- ``transformer``: one TransformerEncoderLayer step, batch 16, sequence 128, d_model 256,
  4 heads, feed-forward 1024, dropout 0.

Each step is forward, cross-entropy, backward and an SGD update. The same model code runs
on both libraries (tracejit's names are PyTorch's), weights are copied from the tracejit
model by state_dict name, and every system's first losses are compared with PyTorch's.
One process per system, run one after the other; the median step after warm-up is
reported, with the ratio to PyTorch eager taken within the run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODELS = ("cnn", "lstm", "transformer")
SYSTEMS = ("torch_eager", "tracejit_eager", "tracejit_compiled")


def build(m, name: str):
    """The model and one batch, written once against ``m`` (tracejit or torch)."""
    nn = m.nn
    if name == "cnn":
        class CNN(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32)
                self.c2, self.b2 = nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64)
                self.fc = nn.Linear(1600, 10)

            def forward(self, x):
                x = m.nn.functional.max_pool2d(m.relu(self.b1(self.c1(x))), 2)
                x = m.nn.functional.max_pool2d(m.relu(self.b2(self.c2(x))), 2)
                return self.fc(x.reshape(x.shape[0], -1))
        return CNN(), ((64, 1, 28, 28), "float"), ((64,), 10)
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
        return LM(), ((32, 64), 64), ((32 * 64,), 64)
    if name == "transformer":
        class Enc(nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
                self.head = nn.Linear(256, 10)

            def forward(self, x):
                return self.head(self.layer(x)).reshape(-1, 10)
        return Enc(), ((16, 128, 256), "float"), ((16 * 128,), 10)
    raise ValueError(name)


def _inputs(spec, target, m, np):
    rng = np.random.default_rng(0)
    shape, kind = spec
    if kind == "float":
        x = rng.standard_normal(shape).astype(np.float32)
        xt = m.tensor(x)
    else:
        xt = m.tensor(rng.integers(0, kind, shape))
    y = m.tensor(rng.integers(0, target[1], target[0]))
    return xt, y


def run_system(system: str, model: str, steps: int) -> dict:
    import numpy as np
    if system == "torch_eager":
        import torch as m
        torch = m
        torch.manual_seed(0)
    else:
        import tracejit as m
        m.manual_seed(0)
    net, xspec, tspec = build(m, model)
    weights = os.environ.get("BENCH_MODELS_WEIGHTS")
    if weights:   # every system starts from the same weights (tracejit's, by state_dict name)
        arrays = dict(np.load(weights))
        net.load_state_dict({k: m.tensor(v) for k, v in arrays.items()})
    net.train()
    x, y = _inputs(xspec, tspec, m, np)
    opt = m.optim.SGD(net.parameters(), lr=0.01)
    fwd = net
    if system == "tracejit_compiled":
        fwd = m.script(net)        # TRACEJIT_COMPILE=sync: the first call compiles, later steps are compiled

    def step():
        opt.zero_grad()
        loss = m.nn.functional.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return float(loss.item())

    t0 = time.perf_counter()
    losses = [step()]
    first = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t)
    times.sort()
    return {"system": system, "model": model, "ms": 1e3 * times[len(times) // 2],
            "first_call_s": first, "losses": losses[:3]}


def _save_weights(model: str, path: str) -> None:
    import numpy as np
    import tracejit as tj
    tj.manual_seed(0)
    net, _, _ = build(tj, model)
    np.savez(path, **{k: v.detach().numpy() for k, v in net.state_dict().items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--worker", nargs=2, metavar=("SYSTEM", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(run_system(args.worker[0], args.worker[1], args.steps)))
        return 0
    import tempfile
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            wpath = os.path.join(tmp, f"{model}.npz")
            _save_weights(model, wpath)
            for system in args.systems.split(","):
                env = dict(os.environ, BENCH_MODELS_WEIGHTS=wpath, TRACEJIT_COMPILE="sync")
                p = subprocess.run([sys.executable, __file__, "--worker", system, model, "--steps",
                                    str(args.steps)], capture_output=True, text=True, env=env)
                if p.returncode != 0:
                    last = (p.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"{model:12s} {system:18s} skipped: {last}", file=sys.stderr)
                    continue
                r = json.loads(p.stdout.strip().splitlines()[-1])
                rows.append(r)
                print(f"{model:12s} {system:18s} {r['ms']:9.1f} ms/step  first call {r['first_call_s']:.2f} s  "
                      f"losses {['%.5f' % v for v in r['losses']]}", file=sys.stderr)
    print("\n| model | system | ms/step | vs torch eager | first call [s] |\n|---|---|---:|---:|---:|")
    for model in args.models.split(","):
        ref = next((r["ms"] for r in rows if r["model"] == model and r["system"] == "torch_eager"), None)
        for r in (r for r in rows if r["model"] == model):
            ratio = f"{r['ms'] / ref:.2f}x" if ref else "n/a"
            print(f"| {model} | {r['system']} | {r['ms']:.1f} | {ratio} | {r['first_call_s']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
