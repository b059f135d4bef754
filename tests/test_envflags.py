"""The table of environment switches (tracejit/envflags.py) against the source and the docs."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tracejit import envflags

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"TRACEJIT_[A-Z0-9_]*[A-Z0-9]")


def _names_in_package() -> dict:
    found: dict = {}
    for path in sorted((ROOT / "tracejit").rglob("*.py")):
        for name in NAME.findall(path.read_text()):
            found.setdefault(name, path.relative_to(ROOT).as_posix())
    return found


def test_every_variable_in_the_source_is_a_row_of_the_table():
    found = _names_in_package()
    assert len(found) >= 10  # the scan itself works
    missing = {n: where for n, where in found.items() if n not in envflags.SWITCHES}
    assert not missing, f"TRACEJIT_ variables read but not in envflags.SWITCHES: {missing}"


def test_every_row_is_used_and_documented_where_it_says():
    found = _names_in_package()
    for s in envflags.SWITCHES.values():
        # used somewhere besides its own row
        uses = [p for p in (ROOT / "tracejit").rglob("*.py")
                if p.name != "envflags.py" and s.name in p.read_text()]
        assert uses, f"{s.name} is in the table but nothing mentions it"
        assert s.meaning and s.documented
        doc = s.documented
        assert doc.startswith(("docs/guide/", "tracejit/")), f"{s.name}: documented in {doc!r}"
        text = (ROOT / doc).read_text()
        if doc.startswith("docs/"):
            # the prose, not the generated switch table, must explain it
            text = re.sub(r"<!-- gendocs:.*?<!-- /gendocs -->", "", text, flags=re.S)
        assert s.name in text, f"{doc} does not mention {s.name}"
    assert set(found) <= set(envflags.SWITCHES)


def test_no_module_reads_a_tracejit_variable_from_os_environ_itself():
    """One parser: only envflags reads the switches (writes, for child processes, are fine)."""
    read = re.compile(r"os\.environ(?:\.get\(|\[)\s*[\"'](TRACEJIT_[A-Z_]+)[\"']\s*[,)\]]")
    offenders = []
    for path in (ROOT / "tracejit").rglob("*.py"):
        for line in path.read_text().splitlines():
            m = read.search(line)
            if m and not re.search(r"os\.environ\[[^]]+\]\s*=", line) and "_data" not in line:
                offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
            if "os.environ._data" in line or "getattr(os.environ, \"_data\"" in line:
                if path.name != "envflags.py":
                    offenders.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not offenders, offenders


def test_parser_spelling_defaults_and_unknown_names(monkeypatch):
    monkeypatch.delenv("TRACEJIT_CACHE", raising=False)
    assert envflags.enabled("TRACEJIT_CACHE") and not envflags.is_off("TRACEJIT_CACHE")
    for off in ("0", " OFF ", "no", "False", ""):
        monkeypatch.setenv("TRACEJIT_CACHE", off)
        assert envflags.is_off("TRACEJIT_CACHE"), off
    monkeypatch.setenv("TRACEJIT_CACHE", "yes")
    assert envflags.enabled("TRACEJIT_CACHE")
    monkeypatch.delenv("TRACEJIT_CHECK", raising=False)
    assert not envflags.enabled("TRACEJIT_CHECK")
    monkeypatch.setenv("TRACEJIT_COMPILE_TIMEOUT", "2.5")
    assert envflags.number("TRACEJIT_COMPILE_TIMEOUT") == 2.5
    monkeypatch.setenv("TRACEJIT_COMPILE_TIMEOUT", "soon")
    assert envflags.number("TRACEJIT_COMPILE_TIMEOUT") is None
    monkeypatch.delenv("TRACEJIT_COMPILE_TIMEOUT")
    assert envflags.number("TRACEJIT_COMPILE_TIMEOUT") == 300.0
    monkeypatch.setenv("TRACEJIT_COMPILE_WORKERS", "-3")
    assert envflags.integer("TRACEJIT_COMPILE_WORKERS") is None
    monkeypatch.setenv("TRACEJIT_COMPILE_WORKERS", " 3 ")
    assert envflags.integer("TRACEJIT_COMPILE_WORKERS") == 3
    with pytest.raises(KeyError, match="TRACEJIT_NOPE"):
        envflags.value("TRACEJIT_NOPE")
    with pytest.raises(KeyError):
        envflags.any_set("TRACEJIT_NOPE")


def test_any_set_sees_changes_made_after_it_was_built(monkeypatch):
    monkeypatch.delenv("TRACEJIT_DISABLE", raising=False)
    monkeypatch.delenv("TRACEJIT_CHECK", raising=False)
    probe = envflags.any_set("TRACEJIT_DISABLE", "TRACEJIT_CHECK")
    assert not probe()
    os.environ["TRACEJIT_CHECK"] = "0"
    try:
        assert probe()  # set, even to off: the caller then parses the value
    finally:
        del os.environ["TRACEJIT_CHECK"]
    assert not probe()


def test_markdown_table_lists_every_switch():
    table = envflags.markdown_table()
    for name in envflags.SWITCHES:
        assert f"`{name}`" in table


# ---------------------------------------------------------------- the internal switches
# Rows documented in a module of tracejit/ (not a guide page) turn one path of the CPU backend
# off against another, for A/B measurements: each is flipped by a test that holds both paths
# to the same values (below, or in the tests of its module).
INTERNAL = [s.name for s in envflags.SWITCHES.values()
            if s.documented.startswith("tracejit/") and not s.meaning.startswith(("internal", "tests only"))]


# switches the compiled LSTM LM's gradients are held to across (the last test below)
_LSTM_SWITCHES = ["TRACEJIT_SCATTER_PRODUCTS", "TRACEJIT_CHUNK_NESTED_PAIRS"]


@pytest.mark.parametrize("name", INTERNAL)
def test_every_internal_switch_is_flipped_by_a_test(name):
    flips = [p for p in (ROOT / "tests").rglob("*.py")
             if re.search(rf"(setenv\(|_both\(monkeypatch,)\s*[\"']{name}[\"']", p.read_text())]
    assert flips or name in _LSTM_SWITCHES, f"no test sets {name}: both of its paths need a test"


def _both(monkeypatch, name, run):
    """run() with the switch on, then off (each in a fresh state the caller makes)."""
    monkeypatch.setenv(name, "1")
    on = run()
    monkeypatch.setenv(name, "0")
    return on, run()


def _lstm_lm_grads(batch_first: bool = True):
    import numpy as np
    import tracejit as tj
    tj.manual_seed(0)
    emb, rnn = tj.nn.Embedding(12, 16), tj.nn.LSTM(16, 16, num_layers=2, batch_first=batch_first)
    ids = tj.tensor(np.random.default_rng(1).integers(0, 12, (4, 40)))
    f = tj.trace(lambda ids: (rnn(emb(ids if batch_first else ids.T))[0] ** 2).sum())
    f(ids).backward()
    return [p.grad.numpy().copy() for p in list(emb.parameters()) + list(rnn.parameters())]


@pytest.mark.parametrize("name", _LSTM_SWITCHES)
def test_compiled_lstm_lm_gradients_do_not_depend_on_the_switch(monkeypatch, name):
    import numpy as np
    on, off = _both(monkeypatch, name, _lstm_lm_grads)
    for a, b in zip(on, off):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
