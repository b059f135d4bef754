"""The run's report: every step's record and exit, merged into ``gpu_check.json``.

``tools/gpu_check.sh`` leaves, per step, ``<work>/steps/<name>.rc`` ("RC SECONDS TIMEOUT";
RC "skip" for a step the mode leaves out, "kept" for an install left alone, "budget"
for one the run's time budget left no room for) and the step's own record, ``<name>.json`` (`record.Record`). A step whose
process died or hit its timeout keeps the figures it had saved and is failed with the
reason. The JSON holds ``steps`` (name -> record, in run order), ``targets`` (every
step's targets in one list), ``machine`` (from the versions step) and ``summary``.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

SCHEMA = 1


def _read_rc(path: Path):
    if not path.exists():
        return None
    parts = path.read_text().split()
    rc = parts[0] if parts else "?"
    rc = int(rc) if rc.lstrip("-").isdigit() else rc
    num = [float(p) for p in parts[1:3]] + [None, None]
    return rc, num[0], num[1]


def _install(steps_dir: Path, rcinfo) -> dict:
    rc, seconds, budget = rcinfo
    out_file = steps_dir / "install.txt"
    tail = out_file.read_text()[-2000:] if out_file.exists() else ""
    if rc in ("skip", "kept"):
        why = "dry run: runs from the tree (PYTHONPATH)" if rc == "skip" else tail.strip()
        return {"status": "skipped", "reason": why, "figures": {}, "targets": {}, "details": {}}
    rec = {"status": "passed" if rc == 0 else "failed", "figures": {}, "targets": {},
           "details": {"pip_output_tail": tail}, "wall_s": seconds, "timeout_s": budget}
    rec["reason"] = None if rc == 0 else (f"pip exited with {rc}; the steps ran from the tree (PYTHONPATH)")
    return rec


def step_result(steps_dir: Path, name: str) -> dict:
    """The final record of step `name` from its record file and its exit."""
    rcinfo = _read_rc(steps_dir / f"{name}.rc")
    if name == "install" and rcinfo is not None:
        return _install(steps_dir, rcinfo)
    f = steps_dir / f"{name}.json"
    rec = json.loads(f.read_text()) if f.exists() else None
    if rcinfo is None:
        return {"status": "failed", "reason": "never run (the run stopped before it)"}
    rc, seconds, budget = rcinfo
    if rc == "budget":
        return {"status": "skipped", "reason": "not started: the run's time budget was spent"}
    timed_out = rc in (124, 137)
    why = (f"timed out after {budget:.0f} s" if timed_out
           else f"exited with {rc}" if rc != 0 else None)
    if rec is None:
        rec = {"status": "failed", "reason": f"{why or 'ended'} before writing a result",
               "figures": {}, "targets": {}, "details": {}}
    elif rec.get("status") is None:
        rec["status"], rec["reason"] = "failed", f"{why or 'ended'} mid-step (figures so far kept)"
    elif why is not None and rec["status"] != "failed":
        rec["status"], rec["reason"] = "failed", f"{why} after recording {rec['status']}"
    rec["wall_s"], rec["timeout_s"] = seconds, budget   # the process, start-up included
    return rec


def build(work: Path, steps: list, mode: str, started: float) -> dict:
    steps_dir = Path(work) / "steps"
    results = {name: step_result(steps_dir, name) for name in steps}
    targets = []
    for name, rec in results.items():
        for key, t in rec.get("targets", {}).items():
            targets.append({"step": name, "name": key, **t})
    versions = results.get("versions", {})
    now = _dt.datetime.now(_dt.timezone.utc)
    start = _dt.datetime.fromtimestamp(started, _dt.timezone.utc)
    summary = {s: [n for n, r in results.items() if r.get("status") == s]
               for s in ("passed", "failed", "skipped")}
    summary["targets_met"] = [f"{t['step']}.{t['name']}" for t in targets if t.get("met") is True]
    summary["targets_missed"] = [f"{t['step']}.{t['name']}" for t in targets if t.get("met") is False]
    summary["targets_not_judged"] = [f"{t['step']}.{t['name']}" for t in targets if t.get("met") is None]
    return {"schema": SCHEMA, "tool": "tools/gpu_check.sh", "mode": mode,
            "started": start.isoformat(timespec="seconds"), "finished": now.isoformat(timespec="seconds"),
            "wall_s": round((now - start).total_seconds(), 1),
            "machine": {**versions.get("figures", {}), **versions.get("details", {})},
            "steps": results, "targets": targets, "summary": summary}


def _brief(figures: dict, n: int = 6) -> str:
    parts = [f"{k}={v}" for k, v in figures.items() if not isinstance(v, (dict, list))]
    return ", ".join(parts[:n])


def print_summary(report: dict) -> None:
    print(f"\n== gpu_check ({report['mode']}): {report['wall_s']} s ==")
    for name, rec in report["steps"].items():
        secs = rec.get("wall_s")
        head = f"{name:<18} {rec.get('status', '?'):<8} {'' if secs is None else f'{secs:6.1f} s'}"
        print(head + (f"  {_brief(rec.get('figures', {}))}" if rec.get("figures") else ""))
        if rec.get("reason"):
            print(f"{'':<20}{rec['reason'][:300]}")
    print("targets:")
    for t in report["targets"]:
        met = {True: "met", False: "MISSED", None: "n/a"}[t.get("met")]
        print(f"  {t['step']}.{t['name']}: {met}  ({t['target']}; value {t.get('value')})"
              + (f" {t['note']}" if t.get("note") else ""))
    s = report["summary"]
    print(f"passed {len(s['passed'])}, failed {len(s['failed'])}, skipped {len(s['skipped'])}; "
          f"targets met {len(s['targets_met'])}, missed {len(s['targets_missed'])}, "
          f"not judged {len(s['targets_not_judged'])}")
