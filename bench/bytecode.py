"""tracejit's and bench's modules compiled to bytecode before a benchmark starts its processes.

Why: a first call imports modules lazily (the CNN's cold first step: the compile backend's
9 modules), and a process that finds no bytecode compiles each from source in that call. A
shell with ``PYTHONDONTWRITEBYTECODE=1`` (this machine's) never writes any, so every fresh
process paid it: ~10 ms of the CNN's first step against ~1.2 ms importing bytecode, a figure
no installed package (a wheel compiles at install) shows. ``compileall`` writes bytecode
whatever the shell says, into the tree's ``__pycache__`` (git-ignored). Not into a
``PYTHONPYCACHEPREFIX``: with a prefix set, Python looks for every module's bytecode there
only, so numpy's and numba's would compile from source instead (an eager first step: +0.8 s).
"""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_done = False


def compile_once() -> None:
    """Write tracejit's and bench's bytecode (once per process; ~0.5 s the first time in a
    tree, ~0.1 s when it is up to date: compileall skips current files). A tree that cannot
    be written (a read-only install) is left as it is: its processes import what is there."""
    global _done
    if not _done:
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "tracejit"),
                        os.path.join(ROOT, "bench")], check=False, capture_output=True)
        _done = True
