"""Turn a run's results into a Markdown table, a JSON file and a PNG chart.

Ratios (speed-up vs numpy eager, multiple of the bandwidth bound) are computed here,
from figures measured in the same run, never against numbers from another run.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from . import systems as S
from . import workloads as W

BASELINE = "numpy"

# Agreement with numpy's check values: (relative tolerance) per check key; training
# losses drift apart over many float32 steps, so the final loss gets a looser bound.
CHECK_TOL = {"final_loss": 5e-2}
DEFAULT_TOL = 2e-3
BUSY = 0.25  # fraction of the CPUs used by other work around the run above which we warn


# ---------------------------------------------------------------- numbers
def fmt(value, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit == "count":
        return f"{int(value)}"
    if unit == "x":
        # two decimals below 10: the bound's target is 1.0x, and 1.04x must not read 1.0x
        if value < 10:
            return f"{value:.2f}×"
        return f"{value:.1f}×" if value < 100 else f"{value:.0f}×"
    v = float(value)
    if v >= 100:
        s = f"{v:.0f}"
    elif v >= 10:
        s = f"{v:.1f}"
    elif v >= 1:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3f}"
    return s


def unit_label(unit: str) -> str:
    return {"us": "µs", "ms": "ms", "x": "×", "count": "#"}.get(unit, unit)


def summarize(workload: W.Workload, res: dict) -> str:
    """One progress line's worth of a system's result for one workload."""
    if "skipped" in res:
        return f"skipped: {res['skipped']}"
    if "error" in res:
        return f"ERROR: {res['error']}"
    def one(m: W.Metric) -> str:
        text = fmt(res[m.key], m.unit)
        # an "x" figure carries its own sign
        return f"{m.label} {text}" if m.unit == "x" else f"{m.label} {text} {unit_label(m.unit)}"
    return ", ".join(one(m) for m in workload.metrics if res.get(m.key) is not None)


def add_derived(data: dict) -> None:
    """Fill in the metrics that need the machine's bandwidth (x bound)."""
    bw = (data.get("machine") or {}).get("bandwidth_gbps")
    gelu = data["results"].get("gelu")
    if not bw or not gelu:
        return
    for res in gelu.values():
        for phase in ("fwd", "fwdbwd"):
            if res.get(f"{phase}_ms") is not None:
                bound_ms = res[f"{phase}_bytes"] / (bw * 1e9) * 1e3
                res[f"{phase}_bound_ms"] = bound_ms
                res[f"{phase}_x_bound"] = res[f"{phase}_ms"] / bound_ms


def _bound_note(data: dict, key: str) -> str:
    for res in data["results"].get("gelu", {}).values():
        if res.get(f"{key}_bound_ms"):
            return f" (bound {fmt(res[f'{key}_bound_ms'], 'ms')} ms)"
    return ""


def _busy(data: dict) -> float:
    meta = data["meta"]
    return max(meta.get("busy_before") or 0.0, meta.get("busy_after") or 0.0)


# ---------------------------------------------------------------- table
def _value(data: dict, workload: str, system: str, key: str):
    res = data["results"].get(workload, {}).get(system)
    if not res or "skipped" in res or "error" in res:
        return None
    return res.get(key)


def rows(data: dict) -> list[tuple[W.Workload, W.Metric, str]]:
    out = []
    for name in data["meta"]["workloads"]:
        wl = W.by_name(name)
        for m in wl.metrics:
            label = f"{m.label} [{unit_label(m.unit)}]"
            if name == "gelu" and m.unit == "ms":
                label += _bound_note(data, m.key[:-3])
            out.append((wl, m, label))
    return out


def table(data: dict) -> str:
    cols = data["meta"]["systems"]
    labels = [data["systems"][s]["label"] for s in cols]
    lines = ["| metric | " + " | ".join(labels) + " |",
             "|---|" + "---:|" * len(cols)]
    for wl, m, label in rows(data):
        cells = []
        for s in cols:
            v = _value(data, wl.name, s, m.key)
            cells.append(fmt(v, m.unit) if v is not None else _why_not(data, wl.name, s))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _why_not(data: dict, workload: str, system: str) -> str:
    res = data["results"].get(workload, {}).get(system)
    if res is None:
        return "–"
    if "error" in res:
        return "error"
    if "skipped" in res and res["skipped"].startswith("eager"):
        return "n/a"
    return "–"


def speedup_table(data: dict) -> str:
    cols = [s for s in data["meta"]["systems"] if s != BASELINE]
    if BASELINE not in data["meta"]["systems"] or not cols:
        return ""
    lines = ["| speed-up vs numpy eager | " + " | ".join(data["systems"][s]["label"] for s in cols)
             + " |", "|---|" + "---:|" * len(cols)]
    any_row = False
    for wl, m, _label in rows(data):
        if not m.timed:
            continue
        base = _value(data, wl.name, BASELINE, m.key)
        if not base:
            continue
        cells = []
        for s in cols:
            v = _value(data, wl.name, s, m.key)
            cells.append(f"{base / v:.2f}×" if v else "–")
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
        any_row = True
    return "\n".join(lines) if any_row else ""


def notes(data: dict) -> list[str]:
    """Why cells are empty: one line per (system, reason), listing the workloads."""
    out = []
    for s in data["meta"]["systems"]:
        info = data["systems"][s]
        if info.get("note"):
            out.append(f"- {info['label']}: {info['note']}")
            continue
        reasons: dict[str, list[str]] = {}
        for name in data["meta"]["workloads"]:
            res = data["results"].get(name, {}).get(s) or {}
            why = res.get("skipped") or (f"error: {res['error']}" if "error" in res else None)
            if why and not why.startswith("eager"):
                reasons.setdefault(why, []).append(name)
        for why, names in reasons.items():
            out.append(f"- {info['label']} ({', '.join(names)}): {why}")
    return out


# Cores other processes kept busy during a timed run above which the report says so.
OTHERS_NOTE = 0.5


# Context switches of a system's threads per timed step (harness.Watch's ``switches``, a
# training workload's steps) above which the report says so: steps whose threads stay
# awake switch a few times in 500 (0.01-0.03 a step); a pool worker that sleeps between
# launches, or threads that lose their cores, switch about once a step or more.
SWITCHES_NOTE = 1.0


def _switches_per_step(res: dict) -> float | None:
    """A training figure's thread switches per timed step, or None (none recorded)."""
    timing = res.get("timing") or {}
    sw = (timing.get("during") or {}).get("switches")
    if not sw or not timing.get("samples"):
        return None
    return sum(sw) / (timing["samples"] * timing.get("number", 1))


def during_timing(data: dict) -> list[str]:
    """One line per (workload, system) whose timed runs saw the system compile or load
    something (its figures include it: not the steady step), other processes keep more
    than `OTHERS_NOTE` cores busy (harness.Watch), or (a training figure) its threads
    switch more than `SWITCHES_NOTE` times a step; and per system that left processes
    running (stopped before the next one started)."""
    out = []
    for name in data["meta"]["workloads"]:
        for s, res in (data["results"].get(name) or {}).items():
            seen = (res or {}).get("during_timing") or {}
            work = {k: v for k, v in seen.items() if k != "others_cores_max" and v}
            others = seen.get("others_cores_max") or 0.0
            per_step = _switches_per_step(res or {})
            switched = per_step is not None and per_step > SWITCHES_NOTE
            if not work and others <= OTHERS_NOTE and not switched:
                continue
            what = [f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in work.items()]
            if others > OTHERS_NOTE:
                what.append(f"other processes up to {others:.2f} cores")
            if switched:
                vol, invol = res["timing"]["during"]["switches"]
                what.append(f"its threads switched {per_step:.1f} times a step ({vol} voluntary, "
                            f"{invol} involuntary)")
            label = data["systems"].get(s, {}).get("label", s)
            out.append(f"- {name}, {label}: {', '.join(what)}")
    for s in data["meta"]["systems"]:
        left = data["systems"].get(s, {}).get("leftover_processes")
        if left:
            out.append(f"- {data['systems'][s]['label']} left {len(left)} process(es) running "
                       f"after it ended, stopped: {'; '.join(c[:80] for c in left)}")
    return out


def checks(data: dict) -> list[str]:
    """Systems whose results disagree with numpy's (they computed something else)."""
    bad = []
    for name, per_system in data["results"].items():
        ref = (per_system.get(BASELINE) or {}).get("check")
        if not ref:
            continue
        for s, res in per_system.items():
            for k, v in (res.get("check") or {}).items():
                r = ref.get(k)
                if r is None or v is None:
                    continue
                tol = CHECK_TOL.get(k, DEFAULT_TOL)
                if not abs(v - r) <= tol * max(abs(r), 1e-12):
                    bad.append(f"{name}/{s}: {k} = {v:.6g}, numpy {r:.6g}")
    return bad


def render(data: dict) -> str:
    m = data.get("machine") or {}
    head = f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores"
    if m.get("bandwidth_gbps"):
        head += (f"; streaming copy {m['bandwidth_gbps']:.1f} GB/s (numpy {m['numpy_copy_gbps']:.1f}, "
                 f"numba prange {m.get('numba_copy_gbps', 0):.1f}, {m.get('numba_threads', '?')} threads)")
    meta = data["meta"]
    busy = _busy(data)
    if busy > BUSY:
        head += (f"\nWARNING: other work was using {busy:.0%} of the CPUs around this run: "
                 "figures are inflated, rerun on a quiet machine")
    head += isa_line(data)
    cfg = meta.get("config", {})
    if cfg.get("stat") == "min":
        head += ("\nFigures: the best of repeated timings after warm-up (--stat min); "
                 "compile and dynamic figures are single first calls")
    else:
        head += ("\nFigures: the median of repeated timings after warm-up; compile and dynamic "
                 "figures are single first calls")
    parts = [head, "", table(data)]
    sp = speedup_table(data)
    if sp:
        parts += ["", sp]
    parts += breakdown_sections(data)
    pb = paired_bound(data)
    if pb:
        parts += ["", "GELU against the copy timed beside it (rounds of ~40 ms of copies, then "
                      "~40 ms of calls, the last timed; per-pair ratio call / bound, median "
                      "[min-max]; median call over the best copy):"] + pb
    d = during_timing(data)
    if d:
        parts += ["", "During the timed runs (not the steady state where a system compiled or loaded):"] + d
    n = notes(data)
    if n:
        parts += ["", "Notes:"] + n
    bad = checks(data)
    if BASELINE not in meta["systems"]:
        parts += ["", "Checks: numpy not in this run, nothing to compare results with"]
    else:
        parts += ["", "Checks: " + ("every system's results agree with numpy's" if not bad
                                    else "MISMATCH (these systems computed something else)")]
        parts += [f"- {b}" for b in bad]
    return "\n".join(parts)


def paired_bound(data: dict) -> list[str]:
    """One line per system and GELU phase from `bench.machine.paired`: the ratio per pair of
    call and copy timed a few milliseconds apart, next to the table's ratio (whose copy was
    timed in another process, before the systems)."""
    out = []
    for s, res in (data["results"].get("gelu") or {}).items():
        for phase, label in (("fwd", "fwd"), ("fwdbwd", "fwd+bwd")):
            p = ((res or {}).get("paired") or {}).get(phase)
            if not p:
                continue
            if "error" in p:
                out.append(f"- {data['systems'][s]['label']}, {label}: {p['error']}")
                continue
            out.append(f"- {data['systems'][s]['label']}, {label}: {p['ratio_median']:.3f}× "
                       f"[{p['ratio_min']:.2f}-{p['ratio_max']:.2f}] over {p['rounds']} pairs; "
                       f"{p['median_over_best_copy']:.3f}× over the best copy "
                       f"(call {p['call_ms_median']:.3f} ms, bound {p['bound_ms_median']:.3f} ms, "
                       f"copy {p['copy_gbps_median']:.1f} GB/s median, "
                       f"{p['copy_gbps_best']:.1f} best)")
    return out


def isa_line(data: dict) -> str:
    """The header's line on the instruction set: nothing for a native run; for an emulated
    one (``--isa avx2``) what each process ran with, and a warning naming any process whose
    libraries did not take the switch (its figures are the host's, not the emulated set's)."""
    isa = data["meta"].get("isa", "native")
    if isa == "native":
        return ""
    off = []
    seen = {name: info.get("isa") or {} for name, info in data["systems"].items()
            if not info.get("note")}
    sg = (data.get("machine") or {}).get("sgemm") or {}
    if sg.get("isa") is not None:
        seen["sgemm reference"] = sg["isa"]
    for name, obs in seen.items():
        wrong = [k for k, bad in (("numba", obs.get("numba_avx512") is True),
                                  ("OpenBLAS", obs.get("openblas_core") not in (None, "Haswell")),
                                  ("torch", obs.get("torch_capability") not in (None, "AVX2")))
                 if bad]
        if wrong:
            off.append(f"{name} ({', '.join(wrong)})")
    line = (f"\nInstruction set: {isa} code on this host (numba/LLVM haswell, OpenBLAS Haswell, "
            "PyTorch ATen/MKL/oneDNN AVX2, XLA max ISA AVX2): the code an AVX2 machine runs, "
            "on this machine's caches and memory; jax.jit's matrix products excepted: "
            "XLA's flag does not reach them (bench/isa.py)")
    if off:
        line += "\nWARNING: the switch did not take in: " + "; ".join(off)
    return line


def breakdown_sections(data: dict) -> list[str]:
    """The MLP step's breakdown (GEMM, fused kernels, Python) of each system that has one."""
    from .breakdown import render as render_breakdown
    out = []
    sgemm = (data.get("machine") or {}).get("sgemm")
    for s, res in (data["results"].get("mlp") or {}).items():
        bd = (res or {}).get("breakdown")
        if bd:
            out += ["", render_breakdown(bd, sgemm)]
    return out


# ---------------------------------------------------------------- files
def write_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")


def write_png(data: dict, path: Path) -> str | None:
    """A bar chart per timed metric (log scale). Returns a note when it cannot draw."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        return "matplotlib not installed: no chart (pip install matplotlib)"
    cols = data["meta"]["systems"]
    color = {s: plt.get_cmap("tab10")(i) for i, s in enumerate(S.SYSTEM_NAMES)}
    panels = []
    for wl, m, label in rows(data):
        # Leave out systems the metric does not apply to (eager ones in "compile").
        shown = [s for s in cols if _value(data, wl.name, s, m.key) or _why_not(data, wl.name, s) != "n/a"]
        if m.timed and any(_value(data, wl.name, s, m.key) for s in shown):
            panels.append((wl, m, label, shown))
    if not panels:
        return "nothing timed: no chart"
    ncol = 3
    nrow = math.ceil(len(panels) / ncol)
    height = sum(max(len(p[3]) for p in panels[r * ncol:(r + 1) * ncol]) * 0.42 + 1.0
                 for r in range(nrow))
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.4 * ncol, height), squeeze=False)
    for ax, (wl, m, label, shown) in zip(axes.flat, panels):
        vals = [_value(data, wl.name, s, m.key) for s in shown]
        ypos = list(range(len(shown)))
        ax.barh(ypos, [v or 0 for v in vals], color=[color[s] for s in shown])
        ax.set_yticks(ypos, [data["systems"][s]["label"] for s in shown], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(label, fontsize=9)
        present = [v for v in vals if v]
        ax.set_xlim(min(present) / 3, max(present) * 6)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=7)
        for y, v, s in zip(ypos, vals, shown):
            text = fmt(v, m.unit) if v else _why_not(data, wl.name, s).replace("–", "skipped")
            ax.text(v if v else ax.get_xlim()[0], y, " " + text, va="center", fontsize=7)
        if wl.name == "gelu":
            bound = next((r.get(f"{m.key[:-3]}_bound_ms") for r in data["results"]["gelu"].values()
                          if r.get(f"{m.key[:-3]}_bound_ms")), None)
            if bound:
                ax.axvline(bound, color="k", ls="--", lw=0.8)
                ax.set_xlim(min(bound, min(present)) / 3, max(present) * 6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    mach = data.get("machine") or {}
    fig.suptitle(f"tracejit benchmarks: {'quick' if data['meta']['quick'] else 'full'} run, "
                 f"{mach.get('cpu', '?')}, {mach.get('cores', '?')} cores, {data['meta']['date'][:10]}"
                 " (log scale, lower is better; dashed line: bandwidth bound)"
                 + ("\nmachine busy with other work during this run: figures are inflated"
                    if _busy(data) > BUSY else ""), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
