"""README.md and docs/: links resolve, every page is in the site's nav, the generated
tables match their sources, the README keeps its two commands, and no page tells history."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import gendocs  # noqa: E402

DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md"] + DOCS
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HISTORY = re.compile(r"\b[Ss]essions? \d+|\b[Ii]ssues? \d+\b|\bsession-\d+")


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchor(heading: str) -> str:
    """The anchor of a heading (GitHub's and mkdocs' toc agree on these): lower case,
    punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def _anchors(path: Path) -> set:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", _prose(path.read_text()), re.M)}


def test_anchor_rule():
    assert _anchor("nn, optim and data") == "nn-optim-and-data"
    assert _anchor("Quickstart: train a model eagerly, then compiled") == \
        "quickstart-train-a-model-eagerly-then-compiled"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    bad = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            bad.append(f"{target}: no heading with anchor #{fragment} in {dest.name}")
    assert not bad, f"{page.relative_to(ROOT)}: broken links: {bad}"


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = set(re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in DOCS}
    assert nav == pages, {"not in the nav": sorted(pages - nav), "no such page": sorted(nav - pages)}


def test_the_guide_pages_the_readme_promises_exist():
    for name in ("eager-and-autograd", "nn-optim-data", "compiling-models", "trace-and-script",
                 "guards-and-dynamic-shapes", "tiered-compilation", "caching", "debugging",
                 "distributed", "cuda", "performance-switches", "troubleshooting",
                 "pytorch-compatibility"):
        assert (ROOT / "docs" / "guide" / f"{name}.md").exists(), name


def test_generated_parts_match_their_sources():
    assert gendocs.stale() == [], "run python tools/gendocs.py"


def test_generated_parts_are_there():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"<!-- gendocs:bench bench/results/\S+\.json -->\n`python -m bench`, full run of", readme)
    assert "| Two-layer net training step" in readme
    switches = (ROOT / "docs" / "guide" / "performance-switches.md").read_text()
    assert "| `TRACEJIT_CHECK` | unset |" in switches
    assert "TRACEJIT_COMPILE_PARENT" not in switches      # internal rows stay out


def test_a_stale_table_is_found(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("x\n<!-- gendocs:switches -->\nold table\n<!-- /gendocs -->\n")
    monkeypatch.setattr(gendocs, "pages", lambda: [page])
    monkeypatch.setattr(gendocs, "ROOT", tmp_path)
    monkeypatch.setattr(gendocs, "switches_table", lambda p: "new table")
    assert gendocs.stale() == ["page.md"]
    assert gendocs.updated(page) == "x\n<!-- gendocs:switches -->\nnew table\n<!-- /gendocs -->\n"


def test_the_readme_keeps_its_two_commands_and_its_size():
    """`.ci/run` runs the README's test command; both must say the same."""
    text = (ROOT / "README.md").read_text()
    top = text.split("\n")[:6]
    assert top[0] == "# tracejit"
    assert "pip install -e . && python examples/quickstart.py" in top
    test_cmd = "pip install -e '.[test,dist,docs]' && python -m pytest"
    assert test_cmd in top
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q -e '.[test,dist,docs]'" in ci and "python -m pytest" in ci
    assert len(text.encode()) <= 20480


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_tells_development_history(page):
    assert not HISTORY.findall(page.read_text()), page
