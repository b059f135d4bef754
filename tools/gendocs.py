"""Write the generated parts of README.md and docs/: tables rendered from the source of truth.

A generated part sits between two markers in a Markdown file:

    <!-- gendocs:KIND [ARG] -->
    ...generated text...
    <!-- /gendocs -->

Kinds:

- ``bench PATH``: the headline benchmark table of the results file PATH (relative to the
  repository root; bench/headline.py renders it). In README.md the caption links the file;
  in docs/ it names it (the site links no file outside docs/).
- ``switches``: every user-facing environment switch of `tracejit.envflags.SWITCHES`, with
  its default, meaning and the guide page that explains it.
- ``coverage PATH``: the PyTorch API coverage recorded in PATH by tools/api_coverage.py.
- ``programs PATH``: the public-style programs' table of the results file PATH, written
  by ``python -m bench.programs`` (bench/programs/report.py renders it).

    python tools/gendocs.py           # rewrite every generated part
    python tools/gendocs.py --check   # exit 1, naming the files, when one is out of date
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARK = re.compile(r"(<!-- gendocs:(\w+)(?: ([^ ]+))? -->\n)(.*?)(<!-- /gendocs -->)", re.S)


def pages() -> list[Path]:
    """Every Markdown file that may hold a generated part."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def switches_table(page: Path) -> str:
    """The user-facing rows of the switch table; the "explained in" column links the guide
    page relative to `page` (rows whose documentation is a module are internal)."""
    from tracejit import envflags
    rows = ["| variable | default | meaning | explained in |", "|---|---|---|---|"]
    for s in envflags.SWITCHES.values():
        doc = s.documented.partition(": ")[0]
        if not doc.startswith("docs/"):
            continue
        target = ROOT / doc
        rel = os.path.relpath(target, page.parent).replace(os.sep, "/")
        title = target.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ").strip()
        default = f"`{s.default}`" if s.default else "unset"
        rows.append(f"| `{s.name}` | {default} | {s.meaning} | [{title}]({rel}) |")
    return "\n".join(rows)


def generate(kind: str, arg: str | None, page: Path) -> str:
    if kind == "bench":
        from bench import headline
        if not arg:
            raise ValueError(f"{page}: a gendocs:bench marker names its results file")
        return headline.render(arg, ROOT, link=page.parent == ROOT)
    if kind == "switches":
        return switches_table(page)
    if kind == "coverage":
        import json

        from tools import api_coverage
        if not arg:
            raise ValueError(f"{page}: a gendocs:coverage marker names its results file")
        return api_coverage.render_markdown(json.loads((ROOT / arg).read_text(encoding="utf-8")))
    if kind == "programs":
        from bench.programs import report
        if not arg:
            raise ValueError(f"{page}: a gendocs:programs marker names its results file")
        return report.render(arg, ROOT)
    raise ValueError(f"{page}: unknown generated part {kind!r}")


def updated(page: Path) -> str:
    """The page's text with every generated part regenerated."""
    text = page.read_text(encoding="utf-8")
    return MARK.sub(lambda m: m.group(1) + generate(m.group(2), m.group(3), page) + "\n" + m.group(5),
                    text)


def stale() -> list[str]:
    """The pages whose generated parts differ from what the sources give now."""
    return [p.relative_to(ROOT).as_posix() for p in pages() if updated(p) != p.read_text(encoding="utf-8")]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        bad = stale()
        for p in bad:
            print(f"{p}: generated part out of date; run python tools/gendocs.py")
        return 1 if bad else 0
    if argv:
        raise SystemExit(__doc__)
    for p in pages():
        new = updated(p)
        if new != p.read_text(encoding="utf-8"):
            p.write_text(new, encoding="utf-8")
            print(f"wrote {p.relative_to(ROOT).as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
