"""The machine facts (tracejit/machine.py): cache sizes read from a sysfs-shaped directory,
the documented fallback where it is missing or unreadable, and a clear error for a level
that does not exist."""
from __future__ import annotations

import pytest

from tracejit import machine


def _caches(root, entries):
    for name, level, kind, size in entries:
        d = root / name
        d.mkdir()
        for field, value in (("level", level), ("type", kind), ("size", size)):
            (d / field).write_text(f"{value}\n")


def test_cache_sizes_read_from_the_cache_directory(tmp_path):
    _caches(tmp_path, (("index0", 1, "Data", "48K"), ("index1", 1, "Instruction", "32K"),
                       ("index2", 2, "Unified", "2048K"), ("index3", 3, "Unified", "32M")))
    root = str(tmp_path)
    assert machine.cache_bytes(1, root) == 48 << 10      # the data cache, not the instruction one
    assert machine.cache_bytes(2, root) == 2 << 20
    assert machine.cache_bytes(3, root) == 32 << 20


def test_fallback_where_sysfs_does_not_say(tmp_path):
    _caches(tmp_path, (("index0", 1, "Instruction", "32K"), ("index2", 2, "Unified", "oops")))
    root = str(tmp_path)
    assert machine.cache_bytes(2, root, default=12345) == 12345
    assert machine.cache_bytes(2, root) == machine.FALLBACK[2] == 512 << 10
    assert machine.cache_bytes(1, root) == machine.FALLBACK[1]       # only an instruction cache
    assert machine.cache_bytes(3, str(tmp_path / "missing")) == machine.FALLBACK[3]


def test_import_time_values_are_the_readers_and_positive():
    # (not ordered: a machine whose sysfs lists no L3 gets the 8 MB fallback beside a
    # larger real L2)
    got = (machine.L1_BYTES, machine.L2_BYTES, machine.L3_BYTES)
    assert got == tuple(machine.cache_bytes(level) for level in (1, 2, 3))
    assert all(v > 0 for v in got)


def test_bad_level_names_the_culprit():
    with pytest.raises(ValueError, match="level must be one of .* got 4"):
        machine.cache_bytes(4)
