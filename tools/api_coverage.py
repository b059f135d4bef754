"""How much of PyTorch's public API tracejit has, and how much of it behaves the same.

    python tools/api_coverage.py                    # summary per namespace
    python tools/api_coverage.py --missing 40       # + the 40 most used missing names
    python tools/api_coverage.py --json             # record tools/data/api_coverage.json
    python tools/gendocs.py                         # ... which docs/guide/pytorch-compatibility.md shows

For every namespace of tools/data/pytorch_api.json (PyTorch's public names, written by
tools/api_names.py) it looks each name up in tracejit's namesake module (``torch.nn`` ->
``tracejit.nn``, ``torch.Tensor`` -> ``tracejit.Tensor``): *present* or *missing*. Where
PyTorch is importable it also makes a tiny sample call of each present name in both
libraries and compares the results (tools/api_samples.py): *matches*, *differs* or *no
sample*. Without PyTorch only presence is measured. Missing names are ranked by how many
public programs use them (tools/data/api_usage.json, written by tools/api_usage.py from
pytorch/examples and the PyTorch tutorials).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAMES_FILE = os.path.join(HERE, "data", "pytorch_api.json")
USAGE_FILE = os.path.join(HERE, "data", "api_usage.json")


def load_names() -> dict:
    with open(NAMES_FILE) as f:
        return json.load(f)


def load_usage() -> dict:
    with open(USAGE_FILE) as f:
        return json.load(f)


def tracejit_namespace(ns: str):
    """tracejit's module (or class) for PyTorch namespace `ns`, or None if it has none."""
    import tracejit
    if ns == "torch.Tensor":
        return tracejit.Tensor
    try:
        return importlib.import_module(ns.replace("torch", "tracejit", 1))
    except ImportError:
        return None


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Entry:
    name: str
    kind: str
    used: int                 # programs using it
    present: bool
    behaviour: str = ""       # "matches" / "differs: ..." / "no sample" / "" (not compared)


@dataclass
class Namespace:
    name: str
    entries: list = field(default_factory=list)

    def count(self, pred) -> int:
        return sum(1 for e in self.entries if pred(e))

    @property
    def total(self) -> int:
        return len(self.entries)

    @property
    def present(self) -> int:
        return self.count(lambda e: e.present)

    @property
    def matches(self) -> int:
        return self.count(lambda e: e.behaviour == "matches")

    @property
    def differs(self) -> int:
        return self.count(lambda e: e.behaviour.startswith("differs"))

    def used_coverage(self) -> tuple[int, int]:
        """(present, total) over the names at least one scanned program uses."""
        used = [e for e in self.entries if e.used]
        return sum(e.present for e in used), len(used)

    def weighted(self) -> float:
        """Share of the name uses in the scanned programs that tracejit has."""
        total = sum(e.used for e in self.entries)
        return sum(e.used for e in self.entries if e.present) / total if total else 1.0


def _layer_or_function(ns: str, e: Entry) -> bool:
    return (ns == "torch.nn" and e.kind == "layer") or ns == "torch.nn.functional"


def measure(namespaces=None, samples: bool = True) -> list:
    names, usage = load_names(), load_usage()["counts"]
    compare = samples and torch_available()
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    if compare:
        import warnings

        import torch
        from api_samples import probe
        warnings.filterwarnings("ignore")
    out = []
    for ns, table in names["namespaces"].items():
        if namespaces and ns not in namespaces:
            continue
        mod = tracejit_namespace(ns)
        space = Namespace(ns)
        for name, kind in table.items():
            present = mod is not None and hasattr(mod, name)
            if not present and mod is not None and kind == "module":   # a submodule not imported yet
                present = importlib.util.find_spec(f"{mod.__name__}.{name}") is not None
            e = Entry(name, kind, usage.get(f"{ns}.{name}", 0), present)
            if compare and present:
                torch_ns = torch.Tensor if ns == "torch.Tensor" else importlib.import_module(ns)
                e.behaviour = probe(ns, name, getattr(torch_ns, name, None), kind)
            space.entries.append(e)
        out.append(space)
    return out


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"


def summary_rows(spaces: list) -> list:
    rows = []
    for s in spaces:
        up, ut = s.used_coverage()
        row = {"namespace": s.name, "names": s.total, "present": s.present,
               "present_pct": _pct(s.present, s.total), "used_present": f"{up}/{ut}",
               "uses_covered": f"{100 * s.weighted():.0f}%"}
        if any(e.behaviour for e in s.entries):
            row["matches"] = s.matches
            row["differs"] = s.differs
        if s.name in ("torch.nn", "torch.nn.functional"):
            lf = [e for e in s.entries if _layer_or_function(s.name, e)]
            row["layers_or_functions"] = f"{sum(e.present for e in lf)}/{len(lf)}"
        rows.append(row)
    return rows


def render_summary(spaces: list) -> str:
    rows = summary_rows(spaces)
    cols = ["namespace", "names", "present", "present_pct", "used_present", "uses_covered"]
    if any("matches" in r for r in rows):
        cols += ["matches", "differs"]
    lines = ["  ".join(f"{c:>20}" if i == 0 else f"{c:>13}" for i, c in enumerate(cols))]
    for r in rows:
        lines.append("  ".join(f"{str(r.get(c, '')):>20}" if i == 0 else f"{str(r.get(c, '')):>13}"
                               for i, c in enumerate(cols)))
    return "\n".join(lines)


def ranked_missing(spaces: list, limit: int | None = None) -> list:
    miss = [(e.used, f"{s.name}.{e.name}") for s in spaces for e in s.entries if not e.present]
    miss.sort(key=lambda t: (-t[0], t[1]))
    return miss[:limit] if limit else miss


RESULTS_FILE = os.path.join(HERE, "data", "api_coverage.json")


def to_json(spaces: list) -> dict:
    """The measure as data: what tools/data/api_coverage.json holds and the page renders."""
    usage = load_usage()
    return {"torch_version": load_names()["torch_version"],
            "compared": any(e.behaviour for s in spaces for e in s.entries),
            "sources": usage["sources"],
            "namespaces": {s.name: [[e.name, e.kind, e.used, e.present, e.behaviour] for e in s.entries]
                           for s in spaces}}


def from_json(data: dict) -> list:
    return [Namespace(ns, [Entry(*row) for row in rows]) for ns, rows in data["namespaces"].items()]


def render_markdown(data: dict) -> str:
    """The generated part of docs/guide/pytorch-compatibility.md, from `to_json`'s data."""
    spaces, compared = from_json(data), data["compared"]
    src = ", ".join(f"{s['repo']} at `{s['commit'][:10]}` ({s['programs']} programs)" for s in data["sources"])
    out = [f"Measured against PyTorch {data['torch_version']}'s public names by "
           "`python tools/api_coverage.py --json tools/data/api_coverage.json` (then "
           "`python tools/gendocs.py`). **present**: tracejit has the name at the same place "
           "(`torch.nn.Conv2d` -> `tracejit.nn.Conv2d`); **used**: of the names the scanned "
           "programs use, how many tracejit has; **uses covered**: the share of all name uses in "
           f"those programs that tracejit has (programs scanned: {src})."]
    if compared:
        out[0] += (" **matches** / **differs**: a tiny sample call of the name in both libraries "
                   "(same arguments; layers with the same weights) gives the same result or not; "
                   "names that set global state, touch files or devices, or whose generic sample "
                   "calls PyTorch refuses get no sample.")
    out += ["", _md_table(spaces, compared), ""]
    by = {s.name: s for s in spaces}
    if "torch.nn" in by and "torch.nn.functional" in by:
        layers = [e for e in by["torch.nn"].entries if e.kind == "layer"]
        fns = by["torch.nn.functional"].entries
        out += [f"Layers (`torch.nn` modules): {sum(e.present for e in layers)} of {len(layers)}; "
                f"functions (`torch.nn.functional`): {sum(e.present for e in fns)} of {len(fns)}.", ""]
    used = [(u, q) for u, q in ranked_missing(spaces) if u]
    out += ["**Missing, most used first** (programs using each): "
            + ", ".join(f"`{q}` ({u})" for u, q in used) + "."]
    unused = len(ranked_missing(spaces)) - len(used)
    out += ["", f"{unused} more missing names are used by none of the scanned programs "
            "(`python tools/api_coverage.py --missing 0` lists them)."]
    if compared:
        out += ["", "**Present but different on the sample call**:", "",
                "| name | what differs |", "|---|---|"]
        for s in spaces:
            for e in s.entries:
                if e.behaviour.startswith("differs"):
                    why = e.behaviour.split(": ", 1)[1].replace("|", "\\|")
                    out.append(f"| `{s.name}.{e.name}` | {why} |")
    return "\n".join(out)


def _md_table(spaces: list, compared: bool) -> str:
    head = ["namespace", "names", "present", "used: present", "uses covered"]
    if compared:
        head += ["matches", "differs", "no sample"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in spaces:
        up, ut = s.used_coverage()
        row = [f"`{s.name}`", str(s.total), f"{s.present} ({_pct(s.present, s.total)})", f"{up} of {ut}",
               f"{100 * s.weighted():.0f}%"]
        if compared:
            row += [str(s.matches), str(s.differs), str(s.count(lambda e: e.behaviour == "no sample"))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--namespace", action="append", help="only this namespace (repeatable)")
    ap.add_argument("--no-samples", action="store_true", help="presence only, no sample calls")
    ap.add_argument("--missing", type=int, default=None, metavar="N",
                    help="list the N most used missing names (0: all)")
    ap.add_argument("--differs", action="store_true", help="list the names whose sample differs")
    ap.add_argument("--json", metavar="PATH", nargs="?", const=RESULTS_FILE,
                    help=f"write the measure as JSON (default path {os.path.relpath(RESULTS_FILE, ROOT)}), "
                         f"which tools/gendocs.py renders into the compatibility page")
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    spaces = measure(args.namespace, samples=not args.no_samples)
    compared = any(e.behaviour for s in spaces for e in s.entries)
    print(render_summary(spaces))
    if args.missing is not None:
        for used, qual in ranked_missing(spaces, args.missing or None):
            print(f"{used:4d}  {qual}")
    if args.differs:
        for s in spaces:
            for e in s.entries:
                if e.behaviour.startswith("differs"):
                    print(f"{s.name}.{e.name}: {e.behaviour}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(to_json(spaces), f, indent=0)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
