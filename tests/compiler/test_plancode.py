"""compiler/plancode.py: a plan's compiled source read back from the disk cache root, under
the caller's file name; a damaged file compiled again; no file with the cache off."""
from __future__ import annotations

import hashlib
import os
import traceback

import numpy as np
import pytest

from tracejit.compiler import cachetool, plancode

SRC = "def plan(a):\n    f = lambda x: x + 1\n    return [f(v) for v in a]\n\ndef bad():\n    raise ValueError('x')\n"


def _run(code):
    ns: dict = {}
    exec(code, ns)
    return ns


def test_the_second_compile_is_read_back_under_the_new_name(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    first = plancode.compiled(SRC, "<plan-1>")
    files = os.listdir(tmp_path / plancode.DIR)
    assert len(files) == 1 and os.stat(tmp_path / plancode.DIR / files[0]).st_mode & 0o077 == 0
    second = plancode.compiled(SRC, "<plan-2>")
    assert second is not first and second.co_code == first.co_code
    ns = _run(second)
    assert ns["plan"]([1, 2]) == [2, 3]
    # every nested code object (the lambda, the comprehension) carries this process's name
    with pytest.raises(ValueError) as info:
        ns["bad"]()
    assert traceback.extract_tb(info.tb)[-1].filename == "<plan-2>"
    inner = [c for c in second.co_consts if hasattr(c, "co_filename")]
    assert inner and all(c.co_filename == "<plan-2>" for c in inner)


def test_a_damaged_file_is_compiled_again_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    plancode.compiled(SRC, "<plan-1>")
    path = tmp_path / plancode.DIR / os.listdir(tmp_path / plancode.DIR)[0]
    whole = path.read_bytes()
    path.write_bytes(whole[:-7] + b"garbage")
    assert _run(plancode.compiled(SRC, "<plan-3>"))["plan"]([5]) == [6]
    again = path.read_bytes()
    assert again != whole[:-7] + b"garbage" and hashlib.sha256(again[32:]).digest() == again[:32]


def test_nothing_is_written_with_the_cache_off_and_clear_removes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE", "0")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "off"))
    assert _run(plancode.compiled(SRC, "<p>"))["plan"](np.arange(2)) == [1, 2]
    assert not (tmp_path / "off").exists()
    monkeypatch.delenv("TRACEJIT_CACHE")
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "on"))
    plancode.compiled(SRC, "<p>")
    assert (tmp_path / "on" / plancode.DIR).is_dir()
    cachetool.clear()
    assert not (tmp_path / "on" / plancode.DIR).exists()
