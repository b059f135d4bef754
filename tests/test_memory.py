"""tracejit.memory: the allocator tuning applied at import, and its opt-out."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tracejit as tj
from tracejit import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tuning is Linux-only")

_PROBE = textwrap.dedent("""
    import resource, numpy as np
    import tracejit as tj
    from tracejit.memory import allocator_tuned
    a = np.ones(100_000, np.float32)  # warm up the heap
    del a
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        (tj.ones(100_000) * 2.0).sum()   # 400 KB temporaries, freed at once
    print(allocator_tuned(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
""")


def _probe(env_extra):
    import os
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_tuned_at_import_and_idempotent():
    assert memory.allocator_tuned() is True
    assert memory.tune_allocator() is True


def test_freed_arrays_are_reused_without_page_faults():
    tuned, faults = _probe({"TRACEJIT_MALLOC_TUNING": "1"})
    assert tuned
    assert faults < 500, faults           # the first pass maps the heap; unmapped: ~100 per temporary


def test_opt_out_leaves_the_allocator_alone():
    tuned, faults = _probe({"TRACEJIT_MALLOC_TUNING": "0"})
    assert not tuned
    assert faults > 2000, faults          # what the tuning saves (glibc default thresholds)
