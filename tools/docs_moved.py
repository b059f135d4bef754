"""Check that splitting the README into a user's guide and docs/ lost no text.

Every non-blank line of an old README (by default the README of dd25e88, the last commit
before the split; pass another revision as the first argument) must appear, as a whole line, in README.md or in one of
docs/*.md, except the lines listed in REWRITTEN below (headings renamed, sentences tightened
in the user's guide, pasted output made a caption). Headings are compared without their
``#`` marks, since moved sections change level; other lines are compared with surrounding
whitespace stripped. Prints what it checked and every line it could not find; exits 1 when
one is missing. This is a check to run by hand after editing the docs, not a test: the old
README it compares against is a git revision, not a file of the tree.

    python tools/docs_moved.py            # against dd25e88's README.md (before the split)
    python tools/docs_moved.py main       # against another revision
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE_SPLIT = "dd25e88"   # the last commit whose README.md held everything

# Old lines that are deliberately not carried over word for word, with why.
REWRITTEN = {
    # A stray instruction fragment (the tail of an HTML comment pasted into the tiers
    # section, session 10); dropped, it never rendered as text a reader could use.
    'With a warm disk cache nothing is compiled: ..." and add the':
        "broken comment fragment",
    "subsection below after the session-10 quiet figures. -->":
        "broken comment fragment",
    # A bench tool's printed header inside a code block that read as a level-2 heading
    # ("## cnn ..."); now a caption line in docs/models-performance.md.
    "## cnn (compiled), one thread, CPU time, load 4.42, loss 2.27941":
        "pasted bench output made a caption",
    # "What compiles" (Models): recurrent layers stopped running their loop through scan in
    # session 11 (one op per layer and direction); the sentence now says so.
    "**What compiles.** All of the above, with gradients equal to eager's. Recurrent layers run":
        "outdated sentence corrected",
    'their time loop through `tj.jit.scan` (see "Loops" below): compiled, the loop is one':
        "outdated sentence corrected",
    "equation, so the graph holds one step and a new sequence length reuses the program (a":
        "outdated sentence corrected",
    "scripted LSTM trained on six lengths compiles at most three times and matches eager step":
        "outdated sentence corrected",
    "for step). Training-mode BatchNorm updates its running statistics inside compiled code":
        "outdated sentence corrected",
    '(see "Module state"). `binary_cross_entropy`\'s check that values lie in [0, 1] runs eagerly':
        "rewrapped after the corrected sentence",
    "only (values are not known while capturing).":
        "rewrapped after the corrected sentence",
    # Contents: the Benchmarks entry says what the section now holds.
    "- [Benchmarks](#benchmarks)":
        "contents entry extended",
}


def _key(line: str) -> str:
    s = line.strip()
    if re.match(r"^#{1,6} ", s):
        s = s.lstrip("#").strip()
    return s


def main(argv: list) -> int:
    rev = argv[1] if len(argv) > 1 else BEFORE_SPLIT
    old = subprocess.run(["git", "show", f"{rev}:README.md"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.splitlines()
    files = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    have: set = set()
    for f in files:
        have.update(_key(s) for s in f.read_text().splitlines())
    rewritten = {k.strip() for k in REWRITTEN}
    checked = missing = excused = 0
    for n, line in enumerate(old, 1):
        if not line.strip():
            continue
        checked += 1
        if _key(line) in have:
            continue
        if line.strip() in rewritten:
            excused += 1
            continue
        missing += 1
        print(f"missing: old README line {n}: {line.strip()[:120]}")
    print(f"old README ({rev}): {len(old)} lines, {checked} non-blank checked against "
          f"{', '.join(str(f.relative_to(ROOT)) for f in files)}")
    print(f"found: {checked - missing - excused}; listed as rewritten: {excused} "
          f"(of {len(REWRITTEN)} listed); missing: {missing}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
