"""Training steps of the models PyTorch users port: tracejit eager and compiled vs PyTorch eager.

    python bench/bench_models.py                     # all models, all systems present
    python bench/bench_models.py --models lstm --steps 20
    python bench/bench_models.py --models lstm --embedding-rewrite off   # the general LSTM LM step

The models (bench/impls/models.py, the same code ``python -m bench``'s ``models`` workload
runs beside torch.compile and jax.jit): a LeNet-style CNN with BatchNorm, an LSTM language
model, a TransformerEncoderLayer. Each step is forward, cross-entropy, backward and an SGD
update; the same model code runs on both libraries (tracejit's names are PyTorch's), every
system starts from the same parameters (by state_dict name) and the first losses are
printed for comparison. One process per system, run one after the other; the median step
after warm-up is reported, with the ratio to PyTorch eager taken within the run.

``--embedding-rewrite off`` compiles without the embedding-gradient rewrite
(`tracejit.jit.scatter_products`), which applies to the LSTM LM only because its vocabulary (64)
is smaller than a batch's tokens (2048): with it off the step is that of an LSTM LM whose
vocabulary is not, the general case (PyTorch's step is the same either way).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SYSTEMS = ("torch_eager", "tracejit_eager", "tracejit_compiled")
# Steps after the first (untimed, every system alike) before the timed ones: on an empty
# cache a compiled model's first steps still load kernels; the timed steps' `during` says
# whether anything compiled in them.
WARMUP = 2


def set_embedding_rewrite(on: bool) -> None:
    """Switch tracejit's embedding-gradient rewrite (its pattern's switch,
    TRACEJIT_SCATTER_PRODUCTS: `tracejit.jit.scatter_products`) for the captures that follow
    in this process."""
    import os
    os.environ["TRACEJIT_SCATTER_PRODUCTS"] = "1" if on else "0"


def run_system(system: str, model: str, steps: int, embedding_rewrite: bool = True) -> dict:
    # the library first, as its users import it: `import tracejit` before numpy sets the
    # thread tunings OpenBLAS reads when numpy loads it (tracejit/threads.py)
    if system == "torch_eager":
        import torch as m
    else:
        import tracejit as m
        set_embedding_rewrite(embedding_rewrite)
    from bench.impls import models
    compile_hook = m.script if system == "tracejit_compiled" else (lambda f: f)
    from bench.harness import Watch, step_times
    counters = None
    if system != "torch_eager":
        from bench.impls.tracejit_impl import kernel_activity
        worker_cpu: dict = {}
        counters = lambda: kernel_activity(worker_cpu)   # noqa: E731
    step, loss = models.model_step(m, compile_hook, model)   # TRACEJIT_COMPILE=sync: the first call compiles
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    losses = [loss()]
    for _ in range(WARMUP):   # untimed: the policy's first readings, a guard's second trace
        step()
        losses.append(loss())
    # what compiled or loaded inside the timed steps, and others' cores (bench.harness.Watch)
    watch = Watch(counters)
    t = step_times(step, steps, 0, watch=watch)
    return {"system": system, "model": model, "ms": 1e3 * t.median_s, "embedding_rewrite": embedding_rewrite,
            "first_call_s": first, "losses": losses[:3], "during": t.during}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--embedding-rewrite", choices=("on", "off"), default="on",
                    help="off: compile without the embedding-gradient rewrite (tracejit.jit.scatter_products)")
    ap.add_argument("--worker", nargs=2, metavar=("SYSTEM", "MODEL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(run_system(args.worker[0], args.worker[1], args.steps, args.embedding_rewrite == "on")))
        return 0
    from bench.impls.models import MODELS
    rows = []
    for model in (args.models.split(",") if args.models else MODELS):
        for system in args.systems.split(","):
            env = dict(os.environ, TRACEJIT_COMPILE="sync")
            p = subprocess.run([sys.executable, __file__, "--worker", system, model, "--steps",
                                str(args.steps), "--embedding-rewrite", args.embedding_rewrite],
                               capture_output=True, text=True, env=env)
            if p.returncode != 0:
                last = (p.stderr.strip().splitlines() or ["?"])[-1]
                print(f"{model:12s} {system:18s} skipped: {last}", file=sys.stderr)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            rows.append(r)
            during = ", ".join(f"{k} {v}" for k, v in (r.get("during") or {}).items())
            print(f"{model:12s} {system:18s} {r['ms']:9.1f} ms/step  first call {r['first_call_s']:.2f} s  "
                  f"losses {['%.5f' % v for v in r['losses']]}  during the timed steps: {during}",
                  file=sys.stderr)
    if args.embedding_rewrite == "off":
        print("\ntracejit compiled without the embedding-gradient rewrite (--embedding-rewrite off)")
    print("\n| model | system | ms/step | vs torch eager | first call [s] |\n|---|---|---:|---:|---:|")
    for model in (args.models.split(",") if args.models else MODELS):
        ref = next((r["ms"] for r in rows if r["model"] == model and r["system"] == "torch_eager"), None)
        for r in (r for r in rows if r["model"] == model):
            ratio = f"{r['ms'] / ref:.2f}x" if ref else "n/a"
            print(f"| {model} | {r['system']} | {r['ms']:.1f} | {ratio} | {r['first_call_s']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
