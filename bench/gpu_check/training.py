"""Training steps on the GPU: tracejit eager (cupy), tracejit compiled (``tj.script``),
PyTorch CUDA eager and ``torch.compile``, for the MLP, the CNN and the Transformer.

The models and the step are the benchmark's, written once against PyTorch's API
(`bench.impls.torchlike`, `bench.impls.models`): the MLP (batch 256, 784-1024-1024-10,
LayerNorm and tanh-GELU, cross-entropy, Adam), the LeNet-style CNN with BatchNorm (batch
64) and one TransformerEncoderLayer (batch 16, sequence 128, d_model 256), each with SGD.
Every system starts from the same numpy-drawn parameters and batch, moved to the GPU, so
the first losses must agree (within 1e-3 relative of PyTorch eager's: a system that
computes something else is failed, not timed). PyTorch runs without TF32, as cupy does.

Each system runs in a process of its own (a CUDA error in one cannot take the others
down), PyTorch eager first and ``torch.compile`` last, and the step saves each result as
it comes: the first step's seconds (compilation included), then the median of up to 20
timed steps (each waited for on the device). Target: tracejit compiled at or under
PyTorch CUDA eager. A dry run has no GPU: it runs tracejit eager on the CPU for one
step of each model, so the code that builds and times the steps keeps working.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .record import REPO_ROOT, Record, gpu_reason, simulated, torch_cuda_reason

SYSTEMS = ("torch_eager", "tracejit_eager", "tracejit_compiled", "torch_compile")
MODELS = ("mlp", "cnn", "transformer")
LOSS_RTOL = 1e-3
TIMED_STEPS = 20
TIMED_SECONDS = 3.0


def _build(T, model: str, device: str, hook):
    """(step, loss) for `model` in framework `T` on `device`, `hook` wrapping the model."""
    from .. import workloads as W
    from ..impls import models, torchlike
    F = T.nn.functional
    if model == "mlp":
        data = W.mlp_data()
        net = torchlike.make_mlp(T)
        torchlike.load_mlp(T, net, data, lambda a: T.from_numpy(np.array(a)))
        x, y = data["x"], data["labels"]
    elif model in models.MODELS:
        net, xspec, tspec = models.build(T, model)
        models.load_shared_params(T, net, model)
        x, y = W.model_batch(model, xspec, tspec)
    else:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    net.train()
    net.to(device)
    x, y = (T.tensor(np.array(a), device=device) for a in (x, y))
    opt = (T.optim.Adam(net.parameters(), lr=W.MLP_LR) if model == "mlp"
           else T.optim.SGD(net.parameters(), lr=0.01))
    loss_fn = F.cross_entropy if hasattr(F, "cross_entropy") else T.cross_entropy
    return torchlike.train_step(opt, hook(net), loss_fn, x, y)


def run_system(model: str, system: str, device: str, budget: float, path: Path, steps: int) -> None:
    """The child side: build, run and time one system's step, saving to `path` as it goes."""
    end = time.monotonic() + budget
    res: dict = {"system": system, "device": device}

    def save():
        path.write_text(json.dumps(res))

    try:
        _run(model, system, device, end, res, save, steps)
    except BaseException as e:   # the parent reports this line; the traceback goes to the log
        lines = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {lines[0][:300] if lines else ''}"
        save()
        raise


def _run(model: str, system: str, device: str, end: float, res: dict, save, steps: int) -> None:
    if system.startswith("torch"):
        import torch as T
        if device == "cuda":
            T.backends.cuda.matmul.allow_tf32 = False
            T.backends.cudnn.allow_tf32 = False
        hook = T.compile if system == "torch_compile" else (lambda m: m)
        res["version"] = T.__version__
    else:
        import tracejit as T
        hook = T.script if system == "tracejit_compiled" else (lambda m: m)
    sync = (T.cuda.synchronize if device == "cuda" else (lambda: None))
    T.manual_seed(0)
    step, loss = _build(T, model, device, hook)
    t0 = time.perf_counter()
    step()
    sync()
    res["first_step_s"] = time.perf_counter() - t0
    res["first_loss"] = loss()
    save()
    for _ in range(min(2, steps)):   # warm-up (allocator pools, cached plans)
        step()
    sync()
    times = []
    while len(times) < steps and time.monotonic() < end and sum(times) < TIMED_SECONDS:
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    res["step_ms"] = statistics.median(times) * 1e3 if times else None
    res["steps_timed"] = len(times)
    res["last_loss"] = loss()
    save()


def _skip_reason(system: str):
    return torch_cuda_reason() if system.startswith("torch") else gpu_reason()


def train(rec: Record, work: Path, model: str) -> None:
    sim = simulated()
    out_dir = Path(work) / "train"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    runs = [("tracejit_eager", "cpu")] if sim else [(s, "cuda") for s in SYSTEMS]
    for system in SYSTEMS:
        if sim:
            results[system] = {"status": "skipped", "reason": _skip_reason(system)}
    torch_why = None if sim else torch_cuda_reason()
    tj_why = None if sim else gpu_reason()
    for system, device in runs:
        why = torch_why if system.startswith("torch") else tj_why
        if why is not None:
            results[system] = {"status": "skipped", "reason": why}
            continue
        key = system if device == "cuda" else f"{system}_cpu_smoke"
        f = out_dir / f"{model}_{key}.json"
        budget = rec.left() - 2
        if budget < 5:
            results[key] = {"status": "skipped", "reason": "the step's time budget ran out"}
            continue
        cmd = [sys.executable, "-m", "bench.gpu_check", "train-system", "--model", model,
               "--system", system, "--device", device, "--budget", f"{budget - 3:.0f}",
               "--steps", str(2 if sim else TIMED_STEPS), "--file", str(f)]
        print(f"  {model}: {key} ...", flush=True)
        try:
            rc = subprocess.run(cmd, cwd=REPO_ROOT, timeout=budget).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        r = json.loads(f.read_text()) if f.exists() else {}
        if rc == 0 and r.get("step_ms") is not None:
            r["status"] = "passed"
        else:
            r["status"] = "failed"
            r["reason"] = (f"timed out after {budget:.0f} s" if rc == "timeout"
                           else r.get("error") or f"exited with {rc} (see the log)")
        results[key] = r
        rec.detail("systems", results)
    _judge(rec, model, results, sim)


def _judge(rec: Record, model: str, results: dict, sim: bool) -> None:
    ref = results.get("torch_eager", {}).get("first_loss")
    for name, r in results.items():
        loss = r.get("first_loss")
        if ref is not None and loss is not None and not abs(loss - ref) <= LOSS_RTOL * abs(ref):
            r["status"], r["reason"] = "failed", f"first loss {loss:.6g}, PyTorch eager's {ref:.6g}"
        if r.get("step_ms") is not None:
            rec.figure(f"{name}_ms", r["step_ms"])
    rec.detail("systems", results)
    compiled = results.get("tracejit_compiled", {}).get("step_ms")
    eager = results.get("torch_eager", {}).get("step_ms")
    rule = "tracejit compiled step <= PyTorch CUDA eager step"
    if compiled is not None and eager is not None:
        rec.figure("compiled_over_torch_eager", compiled / eager)
        rec.target("compiled_vs_torch_eager", rule, compiled / eager, compiled <= eager)
    else:
        rec.target("compiled_vs_torch_eager", rule, None, None,
                   "not applicable under the simulator" if sim else "a system did not run")
    failed = [n for n, r in results.items() if r.get("status") == "failed"]
    ran = [n for n, r in results.items() if r.get("status") == "passed"]
    if failed:
        rec.finish("failed", "; ".join(f"{n}: {results[n].get('reason')}" for n in failed))
    elif sim:
        rec.finish("skipped", "dry run: no GPU; tracejit eager ran one CPU step" if ran else
                   "dry run: no GPU")
    elif not ran:
        rec.finish("failed", "no system ran")
    else:
        rec.finish("passed")
