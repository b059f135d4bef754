"""Security: ``tracejit.load`` never runs code from a file, and the disk kernel cache is
private to the user and never runs an entry that does not match its content hashes.

Everything goes through the public paths (``tracejit.load``, compiled functions). A
"payload" here is a pickle or Python source that would create a marker file if it were
ever unpickled or executed; every test checks that the marker does not exist.
"""
from __future__ import annotations

import io
import json
import logging
import os
import pickle
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tracejit as tj
from tracejit.compiler import diskcache
from tracejit.errors import SerializationError
from differential import assert_same, kernel_cache_at


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def no_pickle(monkeypatch):
    """Any unpickling while the test runs is a failure, whatever the file says."""
    def refuse(*a, **k):
        raise AssertionError("tracejit.load called pickle")
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


def _torch_style_zip(marker) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(_Payload(marker)))
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


PAYLOADS = {
    "raw-pickle": lambda m: pickle.dumps(_Payload(m)),
    "pickle-protocol-0": lambda m: pickle.dumps(_Payload(m), protocol=0),
    "torch-zip": _torch_style_zip,
    "magic-then-pickle": lambda m: b"TRACEJIT" + b"\x01\0\0\0" + pickle.dumps(_Payload(m)),
}


def _refused_without_running(tmp_path, kind):
    marker = tmp_path / "pwned"
    path = tmp_path / f"model-{kind}.pt"
    path.write_bytes(PAYLOADS[kind](marker))
    for source in (path, str(path), path.read_bytes(), io.BytesIO(path.read_bytes())):
        with pytest.raises(SerializationError):
            tj.load(source)
    assert not marker.exists()


@pytest.mark.parametrize("kind", [k for k in PAYLOADS if k != "torch-zip"])
def test_load_never_executes_code_from_the_file(tmp_path, kind, no_pickle):
    _refused_without_running(tmp_path, kind)


def test_a_torch_zip_is_read_by_an_unpickler_that_refuses_other_globals(tmp_path):
    # torch.save's archives are read (serialization_torch.py) by a restricted unpickler:
    # the payload's global (builtins.open) is refused before anything is called
    _refused_without_running(tmp_path, "torch-zip")


def test_load_with_weights_only_false_still_does_not_unpickle(tmp_path, no_pickle):
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    path.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(SerializationError):
        tj.load(path, weights_only=False)
    assert not marker.exists()


# --------------------------------------------------------------------------- disk cache
@pytest.fixture
def cache(tmp_path):
    diskcache.clear_memory_cache()
    root = tmp_path / "deep" / "cache"
    with kernel_cache_at(root):
        yield root
    diskcache.clear_memory_cache()


def cubic(x):
    return x * x * x - tj.sigmoid(x) * 0.5


def _x():
    return tj.tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))


def _entries(root: Path) -> list:
    return sorted(p for p in root.glob("kernels/*/*") if ".tmp-" not in p.name)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_cache_directory_is_created_private(cache):
    old = os.umask(0o022)
    try:
        assert_same(tj.trace(cubic)(_x()), cubic(_x()), "first compile")
    finally:
        os.umask(old)
    assert _mode(cache) == 0o700              # nobody else can even look inside
    (entry,) = _entries(cache)
    for d in (cache / "kernels", entry.parent, entry, entry / "__pycache__"):
        assert _mode(d) & 0o022 == 0, f"{d} is writable by others: {oct(_mode(d))}"
    for d in (entry, entry / "__pycache__"):
        assert _mode(d) & 0o077 == 0, f"{d} is {oct(_mode(d))}"


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o755 | 0o002])
def test_shared_cache_directory_is_refused(cache, mode, caplog):
    cache.mkdir(parents=True)
    os.chmod(cache, mode)
    with caplog.at_level(logging.WARNING, logger="tracejit"):
        assert_same(tj.trace(cubic)(_x()), cubic(_x()), "compiled without the disk cache")
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(msgs) == 1 and "disabled" in msgs[0] and "0o700" in msgs[0], msgs
    assert list(cache.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_cache_directory_owned_by_someone_else_is_refused(cache, caplog):
    cache.mkdir(parents=True, mode=0o700)
    os.chown(cache, 65534, 65534)
    with caplog.at_level(logging.WARNING, logger="tracejit"):
        assert_same(tj.trace(cubic)(_x()), cubic(_x()), "compiled without the disk cache")
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(msgs) == 1 and "owned by uid 65534" in msgs[0], msgs
    assert list(cache.iterdir()) == []


def _tamper(entry: Path, how: str, marker: Path) -> None:
    pyc = entry / "__pycache__"
    if how == "pickle-in-index":
        (nbi,) = pyc.glob("*.nbi")
        nbi.write_bytes(pickle.dumps(_Payload(marker)))
    elif how == "pickle-in-data":
        for nbc in pyc.glob("*.nbc"):
            nbc.write_bytes(pickle.dumps(_Payload(marker)))
    elif how == "code-in-source":
        src = (entry / "kernel.py").read_text()
        (entry / "kernel.py").write_text(f"open({str(marker)!r}, 'w')\n" + src)
    elif how == "symlink":
        (nbi,) = pyc.glob("*.nbi")
        evil = entry.parent / "evil.nbi"
        evil.write_bytes(pickle.dumps(_Payload(marker)))
        nbi.unlink()
        nbi.symlink_to(evil)
    elif how == "manifest-rehashed":
        # An attacker who can rewrite the manifest too: the manifest must match the source
        # the code generator asked for, so a swapped kernel.py is still refused.
        import hashlib
        src = (entry / "kernel.py").read_text()
        evil = f"open({str(marker)!r}, 'w')\n" + src
        (entry / "kernel.py").write_text(evil)
        m = json.loads((entry / "manifest.json").read_text())
        m["files"]["kernel.py"] = hashlib.sha256(evil.encode()).hexdigest()
        (entry / "manifest.json").write_text(json.dumps(m))
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["pickle-in-index", "pickle-in-data", "code-in-source", "symlink",
                                 "manifest-rehashed"])
def test_tampered_cache_entry_is_never_used(cache, tmp_path, how, caplog):
    marker = tmp_path / "pwned"
    assert_same(tj.trace(cubic)(_x()), cubic(_x()), "build")
    (entry,) = _entries(cache)
    _tamper(entry, how, marker)
    diskcache.clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="tracejit"):
        assert_same(tj.trace(cubic)(_x()), cubic(_x()), f"after {how}")
    assert not marker.exists(), "a tampered cache entry was executed"
    st = diskcache.stats()
    assert st["corrupt_entries"] == 1 and st["disk_hits"] == 0 and st["compiles"] == 1, st
    msgs = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(msgs) == 1 and "discarding corrupt entry" in msgs[0], msgs
    # Rebuilt from scratch: the next process (here: a cleared memory cache) loads it cleanly.
    diskcache.clear_memory_cache()
    assert_same(tj.trace(cubic)(_x()), cubic(_x()), "after the rebuild")
    assert diskcache.stats()["disk_hits"] == 1
    assert not marker.exists()
