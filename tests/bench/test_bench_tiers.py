"""bench_tiers' probes import tracejit from a bytecode cache compiled first (or, with
``--source-only``, as the shell has it): a probe's first call must not time the compiling
of modules it imports lazily from source."""
from __future__ import annotations

import os
import subprocess
import sys

from bench import bench_tiers as B


def test_probes_import_compiled_modules_from_a_private_cache(monkeypatch):
    monkeypatch.setattr(B, "BYTECODE", "")
    prefix = B._bytecode()
    try:
        assert prefix and os.path.isdir(prefix) and B._bytecode() == prefix   # once per run
        # a module a first call imports lazily has its bytecode where the probes look
        src = os.path.join(B.ROOT, "tracejit", "compiler", "tiers.py")
        code = ("import importlib.util, sys; "
                f"print(importlib.util.cache_from_source({src!r}))")
        env = dict(os.environ, PYTHONPYCACHEPREFIX=prefix)
        pyc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        assert pyc.startswith(prefix) and os.path.isfile(pyc)
        # and a process given the prefix imports it from there without compiling its source,
        # even with bytecode writing off
        probe = ("import sys, importlib.machinery as m; sys.dont_write_bytecode = True; seen = []; "
                 "f = m.SourceFileLoader.source_to_code; "
                 "m.SourceFileLoader.source_to_code = lambda s, d, p, **k: seen.append(p) or f(s, d, p, **k); "
                 "import tracejit.compiler.tiers as t; "
                 "print(t.__spec__.cached, any(str(p).endswith('tiers.py') for p in seen))")
        env.update(PYTHONPATH=B.ROOT, PYTHONDONTWRITEBYTECODE="1")
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                             check=True, cwd=B.ROOT).stdout.split()
        assert out == [pyc, "False"]
    finally:
        import shutil
        shutil.rmtree(prefix, ignore_errors=True)
        monkeypatch.setattr(B, "BYTECODE", "")
