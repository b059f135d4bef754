"""Runs the programs here under one framework and writes their losses as JSON.

    python _runner.py torch|tracejit eager|compiled WEIGHT_DIR OUT.json prog_a.py ...

Under ``tracejit`` the process's ``import torch`` gives tracejit (bench/programs/torchswap.py),
so each program runs unchanged, as a user's does after rewriting the import. A compiled
tracejit run also writes, under "__compiles__", each program's captures and eager
fallbacks summed over what it compiled (submodules compiled after a graph break included)."""
from __future__ import annotations

import json
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _counts(stats: list) -> dict:
    """{"compiles": captures, "eager_fallbacks": calls run eagerly after a failure}, summed
    over compiled forwards' `cache_stats` and the submodule forwards they hold."""
    out = {"compiles": 0, "eager_fallbacks": 0}
    for s in stats:
        for k in out:
            out[k] += s.get(k, 0)
        sub = _counts(list(s.get("submodules", {}).values()))
        for k in out:
            out[k] += sub[k]
    return out


def main() -> int:
    framework, mode, weights, out = sys.argv[1:5]
    sys.path[:0] = [HERE, ROOT]
    if framework == "tracejit":
        from bench.programs import torchswap
        torchswap.install()
    import _harness
    import torch
    results, compiles = {}, {}
    for prog in sys.argv[5:]:
        torch.set_default_dtype(torch.float32)    # a program may change it for itself
        _harness.STATE.update(framework=framework, compile=mode == "compiled", count=0, compiled=[],
                              store=os.path.join(weights, os.path.basename(prog) + ".npz"))
        try:
            results[prog] = [float(v) for v in runpy.run_path(os.path.join(HERE, prog))["LOSSES"]]
        except Exception as e:  # noqa: BLE001  (reported per program)
            results[prog] = f"{type(e).__name__}: {e}"
        if framework == "tracejit" and mode == "compiled":
            compiles[prog] = _counts([m.cache_stats() for m in _harness.STATE["compiled"]])
    if compiles:
        results["__compiles__"] = compiles
    with open(out, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
