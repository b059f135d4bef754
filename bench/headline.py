"""The headline benchmark table: a tracked results file of ``python -m bench`` as Markdown.

README.md and the docs show this table between two markers; ``python tools/gendocs.py``
writes it there from the file the opening marker names, and a test checks that what is
there matches the file. Figures are never typed by hand.

    python -m bench.headline bench/results/<run>.json      # print the table
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .report import fmt

__all__ = ["ROWS", "COLUMNS", "table", "caption", "render", "load"]

# (label, workload, metric key, unit)
ROWS: tuple = (
    ("Two-layer net training step (64x1000x100, SGD)", "mlp2", "step_us", "µs"),
    ("MLP training step (784-1024-1024-10, LayerNorm, GELU, Adam)", "mlp", "step_ms", "ms"),
    ("CNN training step (LeNet with BatchNorm, batch 64)", "models", "cnn_ms", "ms"),
    ("LSTM language-model step (2 layers, hidden 256)", "models", "lstm_ms", "ms"),
    ("Transformer encoder layer step (d_model 256)", "models", "transformer_ms", "ms"),
    ("GELU chain forward, 4M float32", "gelu", "fwd_ms", "ms"),
    ("GELU chain forward + backward, 4M float32", "gelu", "fwdbwd_ms", "ms"),
    ("5-op call on 16 elements", "overhead", "call_us", "µs"),
    ("Two-layer step, first call, empty kernel cache", "compile", "step_cold_ms", "ms"),
)
# (system in the results file, column heading)
COLUMNS: tuple = (
    ("tracejit_eager", "tracejit eager"),
    ("tracejit_compiled", "tracejit compiled"),
    ("torch_eager", "PyTorch eager"),
    ("torch_compile", "torch.compile"),
    ("jax_jit", "jax.jit"),
)


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _cell(data: dict, workload: str, key: str, system: str, unit: str) -> str:
    res = data.get("results", {}).get(workload, {}).get(system)
    value = res.get(key) if isinstance(res, dict) else None
    if not isinstance(value, (int, float)):
        return "–"
    return f"{fmt(value, 'ms')} {unit}"


def table(data: dict) -> str:
    """One row per headline measure, one column per system; "–" where a system has no
    figure (eager systems compile nothing; a peer that was not installed)."""
    head = "| median of the timed runs | " + " | ".join(h for _, h in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    lines = [head, rule]
    for label, workload, key, unit in ROWS:
        cells = [_cell(data, workload, key, system, unit) for system, _ in COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def caption(data: dict, path: str, link: bool = True) -> str:
    """Where the figures come from: the run's date, command, machine and versions; the
    results file as a link (README) or as a path (the docs site, which links no file
    outside docs/)."""
    meta, machine = data.get("meta", {}), data.get("machine") or {}
    date = str(meta.get("date", "unknown date")).replace("T", " ")
    kind = "quick run (`--quick`)" if meta.get("quick") else "full run"
    cpu = machine.get("cpu", "unknown CPU")
    cores = machine.get("cores")
    versions = []
    for system, names in (("tracejit_compiled", ("tracejit", "numba")), ("torch_eager", ("torch",)),
                          ("jax_jit", ("jax",))):
        v = data.get("systems", {}).get(system, {}).get("versions", {})
        versions += [f"{n} {v[n]}" for n in names if n in v]
    where = f"{cpu}, {cores} cores" if cores else cpu
    return (f"`python -m bench`, {kind} of {date} on {where}, Python {machine.get('python', '?')}; "
            f"{', '.join(versions)}. Source: " + (f"[{path}]({path})." if link else f"`{path}`."))


def render(path: str, root: Path | None = None, link: bool = True) -> str:
    """The caption and the table of the results file at `path` (relative to `root`)."""
    root = root or Path(__file__).resolve().parents[1]
    data = load(root / path)
    return caption(data, path, link) + "\n\n" + table(data)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m bench.headline RESULTS.json")
    p = Path(sys.argv[1])
    print(caption(load(p), p.as_posix()) + "\n\n" + table(load(p)))
