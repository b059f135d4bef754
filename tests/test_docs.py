"""README.md and docs/*.md: every relative link resolves, and every docs file is reachable.

README.md is the user's guide; docs/ holds the engineering history. A link to a moved or
renamed file, an anchor naming a heading that no longer exists, or a docs file that the
README does not link would leave a reader at a dead end.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md"] + DOCS
# [text](target) and ![alt](target); the target ends at whitespace or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text with fenced code blocks and inline code removed (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _links(path: Path) -> list:
    return LINK.findall(_prose(path.read_text()))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path: Path) -> set:
    out = set()
    for line in _prose(path.read_text()).splitlines():
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            out.add(_anchor(m.group(1)))
    return out


def test_the_docs_exist():
    assert len(DOCS) >= 5, [p.name for p in DOCS]


def test_anchor_rule():
    assert _anchor("nn, optim, data, save/load") == "nn-optim-data-saveload"
    assert _anchor("Never wait for the compiler: tiered execution") == \
        "never-wait-for-the-compiler-tiered-execution"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    bad = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest}")
            continue
        if fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            bad.append(f"{target}: no heading with anchor #{fragment} in {dest.name}")
    assert not bad, f"{page.relative_to(ROOT)}: broken links: {bad}"


def test_every_docs_file_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(ROOT / "README.md")
              if t.partition("#")[0]}
    unlinked = [p.relative_to(ROOT).as_posix() for p in DOCS if p.resolve() not in linked]
    assert not unlinked, f"docs files README.md does not link: {unlinked}"


def test_each_docs_file_points_back_to_the_guide():
    for page in DOCS:
        head = page.read_text().split("\n\n", 2)[:2]
        assert head[0].startswith("# "), page.name
        assert "README.md" in head[1], f"{page.name}: its header paragraph must name README.md"


def test_the_readme_keeps_its_first_commands():
    """`.ci/run` and the tests rely on the two commands at the top of README.md."""
    top = (ROOT / "README.md").read_text().split("\n")[:6]
    assert top[0] == "# tracejit"
    assert "pip install -e . && python examples/quickstart.py" in top
    assert "pip install -e '.[test,dist]' && python -m pytest" in top
