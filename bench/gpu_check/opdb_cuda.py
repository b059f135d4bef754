"""The op database (``tests/opdb.py``) on CUDA, against tracejit's CPU results.

On a GPU every sample of every op runs three ways: tracejit eager on the CPU (the
reference), tracejit eager on CUDA tensors (cupy), and ``tracejit.trace`` on CUDA
tensors (the fused groups compiled with numba-cuda). Outputs must agree in number,
shape, dtype and value (float32 within ``max(op tolerance, 1e-4)`` relative, float64
within 1e-7; integers and bools exactly; a random op's shapes and dtypes only). A
documented refusal (NotImplementedError: bfloat16 tensors live on the CPU) is counted as
``refused``, with its message, apart from the failures.

Under the simulator (a dry run) cupy is absent, so the eager and traced CUDA paths are
skipped; instead each sample's traced graph runs through `codegen_cuda.run_graph` on
host arrays (every fused group as a simulated CUDA kernel, every other equation on
numpy) and is compared the same way. Samples whose graph has no fused group are
counted, not compared; one the simulator cannot take (a host array that is neither C
nor Fortran contiguous: the simulator copies host arguments as one block, a GPU reads
cupy views with their strides) is counted as ``simulator_unsupported``.

Coverage comes first: pass 1 checks the first sample of each op's first dtype, pass 2
every other sample. Ops are dealt round-robin to shard processes (one per two cores, at
most 8: compiling kernels is CPU work), each writing its results after every op, so
the step's deadline stops the run with what it covered. A dry run checks pass 1 of
`DRY_RUN_OPS` in one shard (``--full``: every op, both passes, two shards).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .record import REPO_ROOT, Record, gpu_reason, simulated

DRY_RUN_OPS = ("add", "mul", "pow", "tanh", "sigmoid", "gelu.tanh", "where", "clamp", "mean", "linear")
MAX_FAILURES = 200


def _opdb():
    tests = str(REPO_ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import opdb
    return opdb


def _outs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def _to_host(a) -> np.ndarray:
    """A tensor's values as numpy, read from its array (cupy's ``get``), so the comparison
    does not lean on the device transfer under test."""
    a = getattr(a, "_data", a)
    return np.asarray(a.get() if hasattr(a, "get") else a)


def compare(got: list, expect: list, op, dtype) -> str | None:
    """None when `got` matches the CPU result `expect`, else what differs."""
    if len(got) != len(expect):
        return f"{len(got)} outputs, the CPU gives {len(expect)}"
    for k, (g, e) in enumerate(zip(got, expect)):
        g, e = _to_host(g), _to_host(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {k}: {g.dtype}{list(g.shape)}, the CPU gives {e.dtype}{list(e.shape)}"
        if op.random:
            continue
        if e.dtype.kind in "biu":
            if not np.array_equal(g, e):
                return f"output {k}: {int(np.sum(g != e))} of {e.size} values differ"
            continue
        rtol, atol = (1e-7, 1e-10) if e.dtype == np.float64 else (max(op.rtol, 1e-4), max(op.atol, 1e-5))
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        if not close.all():
            i = np.unravel_index(int(np.argmin(close)), close.shape)
            return (f"output {k}: {int((~close).sum())} of {e.size} values differ "
                    f"(at {tuple(int(j) for j in i)}: {g[i]!r} vs {e[i]!r}, rtol {rtol:g})")
    return None


def _graph_of(fn, arrays: list):
    """The optimized traced graph of `fn` and the values of the constants it captured."""
    from tracejit import dtypes
    from tracejit.jit.passes import optimize
    from tracejit.jit.tracer import TraceContext
    from tracejit.ops.registry import Aval
    ctx = TraceContext()
    with ctx:
        ts = [ctx.new_input(Aval(a.shape, dtypes.as_dtype(a.dtype)), f"a{i}") for i, a in enumerate(arrays)]
        outs = _outs(fn(*ts))
    graph = optimize(ctx.graph([ctx.atom(o) for o in outs]))
    return graph, [t.numpy() for t in ctx.const_tensors]


def check_sample(op, dtype, s) -> dict:
    """path -> "passed" | "no_group" | "simulator_unsupported" | an error, for one sample."""
    import tracejit as tj
    try:
        expect = _outs(s.fn(*s.tensors()))
    except Exception as e:  # noqa: BLE001 - the CPU itself refuses: nothing to compare
        return {"cpu": f"the CPU raised {_first_line(e)}"}
    res = {}
    if simulated():
        if not op.traceable or op.random:
            return res
        from tracejit.compiler import codegen_cuda
        from tracejit.compiler.fusion import Group, partition
        try:
            graph, consts = _graph_of(s.fn, list(s.inputs))
            if not any(isinstance(i, Group) for i in partition(graph)):
                return {"kernels": "no_group"}
            got = list(codegen_cuda.run_graph(graph, *s.inputs, *consts))
            res["kernels"] = compare(got, expect, op, dtype) or "passed"
        except ValueError as e:
            res["kernels"] = ("simulator_unsupported" if "non-contiguous buffer" in str(e)
                              else _first_line(e))
        except Exception as e:  # noqa: BLE001 - reported per sample
            res["kernels"] = _first_line(e)
        return res
    ts = [tj.tensor(a, device="cuda") for a in s.inputs]
    try:
        res["eager"] = compare(_outs(s.fn(*ts)), expect, op, dtype) or "passed"
    except Exception as e:  # noqa: BLE001
        res["eager"] = _outcome(e)
    if op.traceable and not op.random:
        try:
            res["compiled"] = compare(_outs(tj.trace(s.fn)(*ts)), expect, op, dtype) or "passed"
        except Exception as e:  # noqa: BLE001
            res["compiled"] = _outcome(e)
    return res


def _outcome(e: Exception) -> str:
    """A documented refusal on CUDA (NotImplementedError: bfloat16 lives on the CPU) is
    counted apart from failures, with its message; anything else fails."""
    return ("refused: " if isinstance(e, NotImplementedError) else "") + _first_line(e)


def _work_items(ops: list, passes: int):
    """(op, dtype, sample, pass) in coverage order: every op's first sample, then the rest."""
    opdb = _opdb()
    firsts, rest = [], []
    for op in ops:
        items = list(opdb.samples_for(op))
        if items:
            firsts.append((op, *items[0], 1))
            rest += [(op, dt, s, 2) for dt, s in items[1:]]
    return firsts + (rest if passes > 1 else [])


def run_shard(names: list, index: int, shards: int, passes: int, deadline: float, path: Path) -> None:
    """Check the ops dealt to shard `index` (every `shards`-th of `names`) until `deadline`,
    saving the results to `path` after every sample."""
    warnings.simplefilter("ignore", RuntimeWarning)   # samples hold inf and nan on purpose
    opdb = _opdb()
    ops = [opdb.OPS_BY_NAME[n] for n in names[index::shards]]
    state = {"done": 0, "stopped_by_deadline": False, "results": []}
    for op, dtype, s, npass in _work_items(ops, passes):
        if time.time() > deadline:
            state["stopped_by_deadline"] = True
            break
        res = check_sample(op, dtype, s)
        state["done"] += 1
        state["results"].append({"op": op.name, "dtype": dtype.name, "pass": npass,
                                 "sample": repr(s)[:200], "paths": res})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)
    state["finished"] = True
    path.write_text(json.dumps(state))


def opdb(rec: Record, work: Path, full: bool = False) -> None:
    sim = simulated()
    if not sim:
        why = gpu_reason()
        if why is not None:
            rec.finish("failed", why)
            return
    db = _opdb()
    names = [op.name for op in db.OPS] if (full or not sim) else list(DRY_RUN_OPS)
    passes = 1 if (sim and not full) else 2
    shards = 1 if (sim and not full) else 2 if sim else max(1, min(8, (os.cpu_count() or 2) // 2))
    rec.figure("ops_selected", len(names))
    rec.figure("shards", shards)
    out_dir = Path(work) / "opdb"
    out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + rec.left() - 6
    procs = []
    for i in range(shards):
        cmd = [sys.executable, "-m", "bench.gpu_check", "opdb-shard", "--index", str(i),
               "--shards", str(shards), "--passes", str(passes), "--deadline", str(deadline),
               "--file", str(out_dir / f"shard{i}.json"), "--ops", ",".join(names)]
        procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT))
    while any(p.poll() is None for p in procs) and rec.left() > 3:
        time.sleep(0.2)
    killed = [i for i, p in enumerate(procs) if p.poll() is None]
    for i in killed:
        procs[i].kill()
        procs[i].wait()
    _summarize(rec, out_dir, shards, names, passes, killed, [p.returncode for p in procs])


def _summarize(rec: Record, out_dir: Path, shards: int, names: list, passes: int,
               killed: list, rcs: list) -> None:
    results, stopped = [], False
    for i in range(shards):
        f = out_dir / f"shard{i}.json"
        state = json.loads(f.read_text()) if f.exists() else {"results": []}
        results += state["results"]
        stopped = stopped or state.get("stopped_by_deadline", False) or not state.get("finished")
    counts: dict = {}
    failures, refused = [], set()
    for r in results:
        for path, outcome in r["paths"].items():
            key = (outcome if outcome in ("passed", "no_group", "simulator_unsupported")
                   else "raised" if path == "cpu" else "refused" if outcome.startswith("refused: ")
                   else "failed")
            counts.setdefault(path, {}).setdefault(key, 0)
            counts[path][key] += 1
            if key == "refused":
                refused.add((r["op"], path, outcome[len("refused: "):]))
            if key == "failed":
                failures.append({"op": r["op"], "dtype": r["dtype"], "path": path,
                                 "sample": r["sample"], "error": outcome})
    covered = {r["op"] for r in results}
    rec.figure("ops_checked", len(covered))
    rec.figure("samples_checked", len(results))
    rec.figure("failures", len(failures))
    for path, c in sorted(counts.items()):
        rec.figure(path, c)
    failed_ops = sorted({f["op"] for f in failures})
    rec.detail("failed_ops", failed_ops)
    rec.detail("failures", _distinct_first(failures)[:MAX_FAILURES])
    rec.detail("refused", [{"op": o, "path": p, "error": m} for o, p, m in sorted(refused)])
    rec.detail("ops_not_reached", [n for n in names if n not in covered])
    if killed or any(rc not in (0, None) for rc in rcs):
        rec.detail("shard_exit_codes", rcs)
    complete = not stopped and len(covered) == len(names)
    coverage = (f"{len(covered)} of {len(names)} ops, {len(results)} samples"
                + ("" if complete else " (stopped by the time budget)"))
    rec.detail("coverage", coverage)
    rule = "no mismatch with the CPU"
    if simulated():
        rec.target("opdb_matches_cpu", rule, None, None, "not applicable under the simulator "
                   "(its kernel results are the step's status)")
    else:
        rec.target("opdb_matches_cpu", rule, f"{len(failures)} mismatches in {len(failed_ops)} ops",
                   not failures and complete)
    bad_rc = [i for i, rc in enumerate(rcs) if rc not in (0, None) and i not in killed]
    if failures:
        rec.finish("failed", f"{len(failures)} mismatches in {len(failed_ops)} ops: "
                             f"{', '.join(failed_ops[:12])}{'...' if len(failed_ops) > 12 else ''}")
    elif bad_rc:
        rec.finish("failed", f"shard(s) {bad_rc} exited with {[rcs[i] for i in bad_rc]}")
    elif not results:
        rec.finish("failed", "no sample was checked")
    else:
        rec.finish("passed", coverage)


def _distinct_first(failures: list) -> list:
    """The failures with one of each distinct (path, error) first, so that a capped list
    shows every kind of failure rather than the many samples of one."""
    def kind(f):
        return f["path"], re.sub(r"\d+", "N", f["error"].split(" failed: ")[-1])[:120]
    seen, first, rest = set(), [], []
    for f in failures:
        k = kind(f)
        (rest if k in seen else first).append(f)
        seen.add(k)
    return first + rest
