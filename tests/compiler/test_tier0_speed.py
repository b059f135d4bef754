"""Tier 0 runs at eager speed (compiler/tiers.py `Tier0`, jit/interpreter.py
`straight_line`): in one process on one thread, a training step through a compiled
model's tier 0 costs about what the same step costs eagerly.

The figure is a ratio of medians of interleaved steps (eager, tier 0, eager, ...), in CPU
time of the one thread that runs them, so the machine's load moves both alike. The
background work (planning, workers, loads) is held, so the entry stays on tier 0 and
only tier 0's own cost is measured (guards, the generated function, autograd recording).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Measured: 1.00-1.05 (digits MLP); the interpreter's loop, before tier 0 ran generated
# code, read 1.05-1.2. A bound that a tier 0 1.25x slower than eager code fails.
BOUND = 1.25

_PROGRAM = """
    import json, statistics, threading, time
    import numpy as np
    import tracejit as tj
    from tracejit import nn
    from tracejit.compiler import tiers

    gate = threading.Event()                       # the background work waits: tier 0 stays
    work = tiers.TieredExecutor._work
    tiers.TieredExecutor._work = lambda self: (gate.wait(), work(self))

    def make(compiled):
        tj.manual_seed(0)
        net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        fwd = tj.script(net, compile="background") if compiled else net
        opt = tj.optim.Adam(net.parameters(), lr=1e-3)

        def step():
            opt.zero_grad()
            loss = tj.nn.functional.cross_entropy(fwd(x), y)
            loss.backward()
            opt.step()
            return float(loss)
        return step, fwd

    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    y = tj.tensor(rng.integers(0, 10, 64))
    eager, _ = make(False)
    tier0, fwd = make(True)
    losses = []
    e, t = [], []
    for k in range(90):
        c0 = time.thread_time()
        le = eager()
        c1 = time.thread_time()
        lt = tier0()
        c2 = time.thread_time()
        losses.append((le, lt))
        if k >= 10:                     # (warm: op plans, numpy's and BLAS's first calls)
            e.append(c1 - c0)
            t.append(c2 - c1)
    print(json.dumps({"ratio": statistics.median(t) / statistics.median(e),
                      "tiers": fwd.cache_stats()["tiers"], "losses": losses[-1]}))
"""


def test_a_tier0_training_step_costs_about_an_eager_step(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(tmp_path / "kernels"),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    env.pop("TRACEJIT_COMPILE_WORKER_FAULT", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_PROGRAM)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["tiers"] == ["tier0"]                    # measured on tier 0 throughout
    le, lt = out["losses"]
    assert abs(le - lt) <= 1e-5 * max(1.0, abs(le))      # the same training, step for step
    assert out["ratio"] <= BOUND, out
