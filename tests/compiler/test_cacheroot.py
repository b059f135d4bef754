"""compiler/cacheroot.py: the disk cache's root with `os` alone (what diskcache.cache_dir
returns as a Path), and that a first call can ask it without importing diskcache."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

from tracejit.compiler import cacheroot, diskcache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_root_is_diskcache_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "a" / "b"))
    got = cacheroot.root()
    assert got == str(tmp_path / "a" / "b") and diskcache.cache_dir() == tmp_path / "a" / "b"
    assert os.stat(got).st_mode & 0o777 == 0o700
    monkeypatch.delenv("TRACEJIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cacheroot.configured() == str(tmp_path / "home" / ".cache" / "tracejit")
    monkeypatch.setenv("TRACEJIT_CACHE", "0")
    assert cacheroot.root() is None and cacheroot.configured() is None


def test_a_shared_root_is_refused_with_one_warning(tmp_path, monkeypatch, caplog):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o770)
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(root))
    diskcache.clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="tracejit"):
        assert cacheroot.root() is None and diskcache.cache_dir() is None
        assert cacheroot.root() is None
    warned = [r for r in caplog.records if "group/other permissions" in r.getMessage()]
    assert len(warned) == 1


def test_tiers_and_hints_do_not_import_the_disk_cache(tmp_path):
    """What a background first call imports (tiers, tierhints, cacheroot) leaves diskcache,
    workers and pathlib to the background thread."""
    # (modules loaded before tracejit are not its doing: an editable install's path hook
    # imports pathlib at start-up)
    code = ("import sys\npre = set(sys.modules)\nimport tracejit\n"
            "from tracejit.compiler import tiers, tierhints\n"
            "assert tierhints.on_disk('0' * 64) is False\n"
            "print([m for m in ('tracejit.compiler.diskcache', 'tracejit.compiler.workers', 'pathlib')"
            " if m in sys.modules and m not in pre])\n")
    env = dict(os.environ, PYTHONPATH=REPO, TRACEJIT_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
