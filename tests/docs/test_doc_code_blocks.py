"""Every Python block of README.md and docs/guide/ runs as written, in a fresh process.

A block is what a reader copies: it must run on its own (its imports, its data), with the
installed tracejit and the user's defaults (background compilation, the user's kernel
cache), in a few seconds. A block that trains does so at a small size. Blocks that need an
optional extra (mpi4py for distributed training) skip with the reason when it is missing.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs" / "guide").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# (a word in the block, the module it needs, the extra that installs it)
NEEDS = (("tracejit.distributed", "mpi4py", "dist"),)


def blocks() -> list:
    out = []
    for page in PAGES:
        for i, m in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8")), 1):
            out.append(pytest.param(m.group(1), id=f"{page.relative_to(ROOT).as_posix()}#{i}"))
    return out


def test_the_pages_have_blocks():
    assert len(blocks()) >= 15, [p.id for p in blocks()]


def test_the_extractor_finds_a_block_and_only_python_ones():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n"
    assert [m.group(1) for m in BLOCK.finditer(text)] == ["x = 1\n"]


@pytest.mark.parametrize("code", blocks())
def test_block_runs(code, tmp_path):
    for word, module, extra in NEEDS:
        if word in code and importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (pip install -e '.[{extra}]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEJIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    script = tmp_path / "block.py"      # a file, as a reader saves it: @script reads source
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"the block failed:\n{code}\n--- stderr:\n{proc.stderr[-4000:]}"
