"""Benchmark processes import tracejit from bytecode compiled first (bench/bytecode.py;
bench_tiers' ``--source-only``: as the shell has it): a probe's first call must not time the
compiling of modules it imports lazily from source."""
from __future__ import annotations

import os
import subprocess
import sys

from bench import bench_tiers as B, bytecode

# Import a module a first call imports lazily, with bytecode writing off (as this machine's
# shell has it), and say whether its source was compiled.
_PROBE = ("import sys, importlib.machinery as m; sys.dont_write_bytecode = True; seen = []; "
          "f = m.SourceFileLoader.source_to_code; "
          "m.SourceFileLoader.source_to_code = lambda s, d, p, **k: seen.append(p) or f(s, d, p, **k); "
          "import tracejit.compiler.tiers, numpy.linalg; "
          "print(any(str(p).endswith('/tracejit/compiler/tiers.py') for p in seen), "
          "any('/numpy/' in str(p) for p in seen))")


def _compiled_sources(env):
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                         check=True, cwd=B.ROOT).stdout
    return out.strip()


def test_probes_import_tracejit_from_bytecode_written_first(monkeypatch):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env.update(PYTHONPATH=B.ROOT, PYTHONDONTWRITEBYTECODE="1")
    monkeypatch.setattr(bytecode, "_done", False)
    bytecode.compile_once()
    assert bytecode._done
    # tracejit's module comes from its bytecode, and numpy's still from site-packages' own
    # (a PYTHONPYCACHEPREFIX would have sent every module's lookup there)
    assert _compiled_sources(env) == "False False"
