"""Summaries of a programs run: per program and system the median step over rounds, the
ratios tracejit/PyTorch (eager to eager, compiled to torch.compile), their geometric
means, and whether the first losses agree; a Markdown table of them (the runner prints
it; tools/gendocs.py puts a recorded run's in docs/guide/benchmarks.md).
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from . import PROGRAMS, SYSTEMS, UNSUPPORTED

# first losses agree when within this relative distance of PyTorch eager's (float32
# sums over a batch in another order)
LOSS_RTOL = 1e-4
# (ratio name, tracejit system, PyTorch system)
RATIOS = (("eager", "tracejit_eager", "torch_eager"),
          ("compiled", "tracejit_compiled", "torch_compile"))


def summarize(runs: dict) -> dict:
    """``runs[program][system]``: the worker results of every round (a list; an entry with
    ``error`` is a failed one). Returns per program: ``ms`` (median over rounds of the
    steady step's median), ``first_loss``, ``loss_ok``, ``ratios``; and ``geomean`` per
    ratio over the programs that have it, with the worst ratio and its program."""
    out: dict = {"programs": {}}
    for prog, per in runs.items():
        row: dict = {"ms": {}, "first_loss": {}, "first_step_s": {}, "errors": {}}
        for system, results in per.items():
            good = [r for r in results if "error" not in r]
            if not good and system in UNSUPPORTED.get(prog, {}):
                row.setdefault("unsupported", {})[system] = UNSUPPORTED[prog][system]
                continue
            if not good:
                row["errors"][system] = results[-1].get("error", "not run") if results else "not run"
                continue
            row["ms"][system] = statistics.median(r["step_s"] for r in good) * 1e3
            row["first_loss"][system] = good[0]["first_loss"]
            row["first_step_s"][system] = min(r["first_step_s"] for r in good)
        ref = row["first_loss"].get("torch_eager")
        row["loss_ok"] = {s: _close(v, ref) for s, v in row["first_loss"].items()} if ref is not None else {}
        row["ratios"] = {name: row["ms"][tj] / row["ms"][pt] for name, tj, pt in RATIOS
                         if tj in row["ms"] and pt in row["ms"]}
        out["programs"][prog] = row
    out["geomean"] = {}
    for name, _, _ in RATIOS:
        vals = {p: r["ratios"][name] for p, r in out["programs"].items() if name in r["ratios"]}
        if vals:
            worst = max(vals, key=vals.get)
            out["geomean"][name] = {"value": math.exp(sum(map(math.log, vals.values())) / len(vals)),
                                    "programs": len(vals), "worst": worst, "worst_ratio": vals[worst]}
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= LOSS_RTOL * max(1.0, abs(b))


def table(summary: dict) -> str:
    """Markdown: one row per program, step ms per system and the two ratios."""
    head = ("| program | PyTorch eager | tracejit eager | torch.compile | tracejit.compile "
            "| eager ratio | compiled ratio |")
    rows = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for prog, r in summary["programs"].items():
        cells = []
        for s in SYSTEMS:
            if s in r["ms"]:
                flag = "" if r["loss_ok"].get(s, True) else " (loss differs)"
                cells.append(f"{r['ms'][s]:.2f}{flag}")
            else:
                cells.append("failed" if s in r["errors"] else
                             "unsupported" if s in r.get("unsupported", {}) else "-")
        ratios = [f"{r['ratios'][n]:.2f}x" if n in r["ratios"] else "-" for n, _, _ in RATIOS]
        rows.append(f"| {prog} | " + " | ".join(cells + ratios) + " |")
    g = summary["geomean"]
    gm = [f"**{g[n]['value']:.2f}x**" if n in g else "-" for n, _, _ in RATIOS]
    rows.append("| geometric mean | | | | | " + " | ".join(gm) + " |")
    return "\n".join(rows)


def render(path: str, root: Path) -> str:
    """The table of the results file `path` (relative to `root`), with a caption naming it
    and the run's date and machine (tools/gendocs.py's ``programs`` part)."""
    data = json.loads((root / path).read_text(encoding="utf-8"))
    meta = data["meta"]
    rounds = meta["rounds"]
    caption = (f"Milliseconds per training step (median over {rounds} round{'s' if rounds != 1 else ''} "
               f"of fresh processes, each the median of its timed steps), {meta['date'][:10]}, "
               f"{meta.get('machine', 'this machine')}; ratios are tracejit over PyTorch "
               f"(eager over eager, tracejit.compile over torch.compile). From `{path}`.")
    return caption + "\n\n" + table(data["summary"])


__all__ = ["summarize", "table", "render", "LOSS_RTOL", "PROGRAMS"]
