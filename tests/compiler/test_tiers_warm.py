"""Warm means compiled (compiler/tiers.py, finish.py): once a run has put every kernel of
a graph on disk, every entry of the next process runs compiled from its first or second
call (training, the short last batch, evaluation), whether the first run waited for its
kernels or exited while they were still compiling.

Each run is a fresh interpreter with a private kernel cache; the model's sizes are this
module's own, so its kernels are new to that cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600   # generous: a cold compile on a shared machine


def _python(code: str, cache) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(cache),
               TRACEJIT_COMPILE="background")
    env.pop("TRACEJIT_COMPILE_WORKER_FAULT", None)
    env.pop("TRACEJIT_COMPILE_FINISH", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


# Two epochs of three training batches of 12, a short last batch of 5 and an evaluation:
# three entries. Per call: (which entry, the tier the call ran on: the tier after it, since
# a switch happens at the start of a call).
_TRAIN = """
    import json, sys
    import numpy as np
    import tracejit as tj
    from tracejit import nn
    from tracejit.jit.function import compiled_function_of

    tj.manual_seed(0)
    net = nn.Sequential(nn.Linear(7, 13), nn.ReLU(), nn.Linear(13, 3))
    model = tj.script(net)
    fn = compiled_function_of(model)
    opt = tj.optim.SGD(net.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    X = tj.tensor(rng.standard_normal((41, 7)).astype(np.float32))
    Y = tj.tensor(rng.integers(0, 3, 41))
    calls, losses = [], []

    def ran(kind, *args):
        calls.append((kind, fn.entry_for(*args).executor.tier))

    for epoch in range(2):
        for lo in range(0, 41, 12):
            x, y = X[lo:lo + 12], Y[lo:lo + 12]
            opt.zero_grad()
            loss = tj.nn.functional.cross_entropy(model(x), y)
            ran("train" if len(x) == 12 else "last", x)
            loss.backward()
            opt.step()
            losses.append(float(loss))
        with tj.no_grad():
            model(X)
            ran("eval", X)
    from tracejit.compiler import diskcache, workers
    out = {"calls": calls, "losses": losses, "entries": fn.cache_stats()["entries"]}
"""


def _compiled_from_second_call(calls) -> dict:
    """Per entry kind, the tiers of its calls; asserts each ran compiled from its 2nd call."""
    seen: dict = {}
    for kind, tier in calls:
        seen.setdefault(kind, []).append(tier)
    for kind, tiers in seen.items():
        assert all(t != "tier0" for t in tiers[1:]), (kind, tiers)
    return seen


def test_a_second_process_runs_every_entry_compiled_from_its_second_call(tmp_path):
    cache = tmp_path / "kernels"
    first = _python(_TRAIN + """
    out["waited"] = tj.compiler.wait(timeout=500)
    print(json.dumps(out))
    """, cache)
    assert first["waited"] and first["entries"] == 3
    second = _python(_TRAIN + """
    out["compiles"] = diskcache.stats()["compiles"]
    print(json.dumps(out))
    """, cache)
    seen = _compiled_from_second_call(second["calls"])
    assert set(seen) == {"train", "last", "eval"} and second["entries"] == 3
    assert second["compiles"] == 0   # loaded, none compiled here
    assert second["losses"] == first["losses"] or all(
        abs(a - b) < 1e-4 for a, b in zip(second["losses"], first["losses"]))


def test_kernels_still_compiling_at_exit_are_there_for_the_next_process(tmp_path):
    cache = tmp_path / "kernels"
    # The first run ends as soon as its entries' kernels are submitted (not compiled).
    first = _python(_TRAIN + """
    from tracejit.compiler import tierhints
    deadline = __import__("time").monotonic() + 300
    exs = [e.origin for e in fn.entries]
    while any(ex.kernel_counts() is None for ex in exs) and __import__("time").monotonic() < deadline:
        __import__("time").sleep(0.02)
    out["pending"] = fn.cache_stats()["pending_kernels"]
    out["markers"] = [tierhints.on_disk_marker(ex._graph_key()) for ex in exs]
    out["workers"] = workers.worker_pids()
    print(json.dumps(out))
    """, cache)
    assert first["pending"] >= 1, first
    deadline = time.monotonic() + TIMEOUT_S
    while not all(os.path.exists(m) for m in first["markers"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(os.path.exists(m) for m in first["markers"])   # a worker finished them all
    second = _python(_TRAIN + """
    out["compiles"] = diskcache.stats()["compiles"]
    print(json.dumps(out))
    """, cache)
    _compiled_from_second_call(second["calls"])
    assert second["compiles"] == 0
