"""compiler/cpu/gemm/choice.py: the measured choice between the template and BLAS, its
default before a measurement, and its store (kept across a restart, ignored when stale or
damaged)."""
import json

import numpy as np
import pytest

from tracejit.compiler.cpu.gemm import choice, products, template
from tracejit.compiler.cpu.runtime import coreshare

pytest.importorskip("numba", reason="the template is numba code")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A cache of its own, sync mode, no process choices."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 64)
    choice.forget()
    products.forget()
    yield tmp_path
    choice.forget()
    products.forget()


KEY = choice.Key(64, 100, 1000, "float32", "nn", False, 2)


def test_key_names_the_layout():
    a = np.ones((64, 1000), np.float32)
    w = np.ones((100, 1000), np.float32)
    assert choice.key_for(a, w.T, 2) == choice.Key(64, 100, 1000, "float32", "nt", False, 2)
    assert choice.key_for(a.T.copy().T, w.T, 1).layout == "tt"   # a read along its columns too
    assert choice.key_for(np.ones((3, 64, 1000)), np.ones((3, 1000, 5)), 4).batched


def test_blas_until_measured_and_no_store_from_an_incomplete_measurement(store, monkeypatch):
    """Sync mode never compiles a configuration in the call: with none on disk the choice is
    BLAS for the process and nothing is stored (a later process with the kernels measures)."""
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: None,
                                                                             "load_now": lambda self: False})())
    assert choice.choose(KEY) == choice.BLAS
    assert choice.settle() == 1 and choice.choose(KEY) == choice.BLAS
    assert choice.store_path() is not None and not choice.store_path().exists()


def test_the_choice_survives_a_restart(store, monkeypatch):
    cfg = template.CONFIGS[2]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    got = choice.measure(KEY)
    assert got == cfg
    data = json.loads(choice.store_path().read_text())
    assert data["choices"][KEY.text()]["choice"] == list(cfg)
    choice.forget()                                          # a new process
    monkeypatch.setattr(choice, "measure", lambda key, configs=None: pytest.fail("measured again"))
    assert choice.choose(KEY) == cfg


def test_a_winner_the_pairs_dispute_runs_blas_and_is_not_kept(store, monkeypatch):
    """The race says the template, the paired confirmation says no (a load during one of
    them): BLAS in this process, nothing stored, and the next process measures again."""
    cfg = template.CONFIGS[2]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(choice, "_confirm", lambda blas, fn: False)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert choice.measure(KEY) == choice.BLAS
    path = choice.store_path()
    assert not path.exists() or KEY.text() not in json.loads(path.read_text())["choices"]
    choice.forget()                                          # a new process, the pairs agree
    monkeypatch.setattr(choice, "_confirm", lambda blas, fn: True)
    assert choice.measure(KEY) == cfg
    assert json.loads(path.read_text())["choices"][KEY.text()]["choice"] == list(cfg)


def _is(fn, cfg):
    # the timed lambda closes over the configuration's loaded kernel (here: the Config)
    cells = [c.cell_contents for c in (fn.__closure__ or ())]
    return any(x is cfg for x in cells)


def test_a_stale_or_damaged_store_is_ignored(store, monkeypatch):
    cfg = template.CONFIGS[1]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert choice.measure(KEY) == cfg
    path = choice.store_path()
    measured = []
    # damaged: a value changed without its hash
    data = json.loads(path.read_text())
    data["choices"][KEY.text()]["choice"] = "blas"
    path.write_text(json.dumps(data))
    choice.forget()
    monkeypatch.setattr(choice, "measure", lambda key, configs=None: measured.append(key) or choice.BLAS)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"load_now": lambda self: True})())
    assert choice.choose(KEY) == choice.BLAS and choice.settle() == 1 and measured == [KEY]
    # stale: another template, BLAS or CPU gives another stamp, whose file is not there
    choice.forget()
    monkeypatch.setattr(choice, "_stamp", lambda: "another")
    assert choice.store_path().name == "another.json"
    assert choice.choose(KEY) == choice.BLAS and choice.settle() == 1 and measured == [KEY, KEY]


def test_a_measurement_keeps_the_fastest_and_checks_values(store, monkeypatch):
    """A configuration whose result is wrong is never chosen, however fast."""
    wrong = template.CONFIGS[0]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.1 if _is(fn, wrong) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: (a @ b) + (1 if c == wrong else 0))
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert choice.measure(KEY) == choice.BLAS


def test_switch_off_keeps_blas(store, monkeypatch):
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")
    monkeypatch.setattr(choice, "measure", lambda key, configs=None: pytest.fail("measured"))
    assert choice.choose(KEY) == choice.BLAS


def test_switch_off_overrides_a_choice_made_earlier_in_the_process(store, monkeypatch):
    """A configuration measured before the switch went off is neither chosen nor installed
    at a call site bound after."""
    monkeypatch.setitem(choice._choices, KEY, template.CONFIGS[0])
    assert choice.choose(KEY) == template.CONFIGS[0]
    monkeypatch.setenv("TRACEJIT_GEMM_CHOICE", "0")
    installed = []
    assert choice.choose(KEY) == choice.BLAS
    assert choice.bind(KEY, lambda c: installed.append(c) or "ran") == "ran"
    assert installed == [choice.BLAS]


def test_a_call_site_binds_once_and_takes_the_measured_choice(store, monkeypatch):
    """A plan's product binds its key at its first call and installs the BLAS side; the
    measurement of that key installs the chosen configuration's launch in its place."""
    cfg = template.CONFIGS[3]
    ran = []
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.005: 0.5 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: ran.append(c) or a @ b)
    monkeypatch.setattr(template, "kernel_for",
                        lambda d, c: type("K", (), {"get": lambda self: c, "fn": c})())
    routed_calls = []

    def routed(a, b):
        routed_calls.append(1)
        return a @ b
    installed = []
    first = products.plan_matmul(routed)(installed.append)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 1000)).astype(np.float32)
    b = rng.standard_normal((1000, 100)).astype(np.float32)
    np.testing.assert_allclose(first(a, b), a @ b, rtol=1e-5)
    assert installed == [routed] and routed_calls == [1] and ran == []
    key = choice.key_for(a, b, products.coreshare.core_share.cpus)
    assert key in choice._pending                      # waiting for its measurement
    assert choice.measure(key) == cfg
    assert len(installed) == 2 and installed[-1] is not routed
    ran.clear()
    np.testing.assert_allclose(installed[-1](a, b), a @ b, rtol=1e-5)
    assert ran == [cfg] and routed_calls == [1]
    # a site of that key bound after the measurement starts on the configuration
    again = []
    products.plan_matmul(routed)(again.append)(a, b)
    assert len(again) == 1 and again[0] is not routed and ran == [cfg, cfg]


def test_product_into_runs_blas_until_its_key_is_measured_then_the_configuration(store, monkeypatch):
    """product_into resolves its route once per operand signature: BLAS while the key waits
    for its measurement, the measured configuration from the next call on (no lookup of
    key, choice or kernel a call)."""
    cfg = template.CONFIGS[3]
    ran = []
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.005: 0.5 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, out=None, **kw: ran.append(c) or a @ b)
    monkeypatch.setattr(template, "kernel_for",
                        lambda d, c: type("K", (), {"get": lambda self: c, "fn": c})())
    monkeypatch.setattr(products, "INTO_MIN_MNK", 0)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 1000)).astype(np.float32)
    b = rng.standard_normal((1000, 100)).astype(np.float32)
    np.testing.assert_allclose(products.product_into(a, b, threads=2), a @ b, rtol=1e-5)
    assert ran == []
    key = choice.key_for(a, b, 2)
    assert key in choice._pending and choice.measure(key) == cfg
    ran.clear()
    out = np.empty((64, 100), np.float32)
    np.testing.assert_allclose(products.product_into(a, b, out, threads=2), a @ b, rtol=1e-5)
    assert ran == [cfg]


def test_background_mode_measures_a_key_when_its_site_calls_again(store, monkeypatch):
    """Shapes that follow the data (a mixture of experts' token counts per expert) come
    once each: in background mode a key's first call runs BLAS and queues nothing, the
    site's next call queues its measurement, and one thread measures every queued key."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    started = []
    monkeypatch.setattr(choice, "_background", lambda: started.append(1))

    def routed(a, b):
        return a @ b
    rng = np.random.default_rng(0)
    b = rng.standard_normal((1000, 100)).astype(np.float32)
    sites = []
    for m in (64, 65):
        installed = []
        first = products.plan_matmul(routed)(installed.append)
        a = rng.standard_normal((m, 1000)).astype(np.float32)
        key = choice.key_for(a, b, products.coreshare.core_share.cpus)
        np.testing.assert_allclose(first(a, b), a @ b, rtol=1e-5)
        assert installed[0] is routed and len(installed) == 2     # BLAS, then a re-bind
        assert key not in choice._pending and not choice._queue
        sites.append((installed, a, key))
    for installed, a, key in sites:
        np.testing.assert_allclose(installed[-1](a, b), a @ b, rtol=1e-5)
        assert installed[-1] is routed and key in choice._pending
        np.testing.assert_allclose(installed[-1](a, b), a @ b, rtol=1e-5)   # queued once
    assert list(choice._queue) == [sites[0][2], sites[1][2]] and started == [1]


def test_a_margin_keeps_blas_for_a_near_tie(store, monkeypatch):
    cfg = template.CONFIGS[0]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.005: 0.95 if _is(fn, cfg) else 1.0)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert 0.95 > choice.MARGIN and choice.measure(KEY) == choice.BLAS


def test_one_share_on_the_calling_thread_is_measured_beside_the_threads(store, monkeypatch):
    """On several threads each configuration is timed as one share too (``serial``); the
    faster is kept, stored and read back as such; on one thread there is no such twin."""
    cfg = template.CONFIGS[-1]
    timed = []

    def fake_time(fn, budget=0.02):
        c = [x.cell_contents for x in fn.__closure__ or () if isinstance(x.cell_contents, template.Config)]
        serial = any(x.serial for x in c)
        timed.append(serial)
        return 0.3 if serial and cfg in c else 1.0
    monkeypatch.setattr(choice, "_time", fake_time)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    got = choice.measure(KEY)
    assert got == cfg._replace(serial=True) and got.serial and got.name.endswith("s")
    assert template.shares_for(1000, 1000, 4, got) == 1
    choice.forget()
    assert choice.choose(KEY) == got                           # read back from the store
    timed.clear()
    choice.measure(KEY._replace(threads=1))
    assert not any(timed)


def test_a_race_win_must_hold_timed_in_pairs_with_blas(store, monkeypatch):
    """A configuration that won the race (a burst of load on BLAS's rounds) but is no faster
    timed right after BLAS, round by round, is not taken, and the disputed measurement is
    not kept for later processes."""
    cfg = template.CONFIGS[0]
    def fake_time(fn, budget=0.005):
        if budget == 0.002:   # the pairs: a tie
            return 1.0
        return 0.5 if _is(fn, cfg) else 1.0
    monkeypatch.setattr(choice, "_time", fake_time)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert choice.measure(KEY) == choice.BLAS
    assert not choice.store_path().exists()


def test_configurations_run_on_the_policys_threads_at_each_call(store, monkeypatch):
    """Under load the policy gives fewer threads: the configurations are timed on that
    count, as call sites run them (BLAS's side is numpy's matmul on it too), and the
    measurement is kept."""
    cfg = template.CONFIGS[1]
    seen = []

    def fake_run(fn, c, a, b, threads=1, **kw):
        seen.append(threads)
        return a @ b
    monkeypatch.setattr(coreshare, "adapt", lambda: 1)
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.005: (fn(), 0.5 if _is(fn, cfg) else 1.0)[1])
    monkeypatch.setattr(template, "run", fake_run)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    assert choice.measure(KEY) == cfg and choice.store_path().exists()
    checks = len(template.CONFIGS)     # (each configuration's values checked on the key's first)
    assert set(seen[:checks]) == {KEY.threads} and set(seen[checks:]) == {1}


def test_bf16_keys_race_words_and_the_kernel_and_keep_a_store_of_their_own(store, monkeypatch):
    """A bf16 key's choice is the words (BLAS) or the kernel (DOT), kept in the bf16 file,
    read back after a restart; the float store is not touched."""
    from tracejit.compiler.cpu.gemm import bf16
    key = choice.Key(40, 50, 70, "uint16", "nn", False, 2)
    monkeypatch.setattr(bf16, "words_matmul", lambda a, b, way="words": bf16.to_bfloat16(
        bf16.to_float32(a) @ bf16.to_float32(b)))
    monkeypatch.setattr(bf16, "dot_matmul", lambda a, b: bf16.to_bfloat16(bf16.to_float32(a) @ bf16.to_float32(b)))
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if "dot" in repr(fn.__code__.co_names) else 1.0)
    assert choice.measure(key) is choice.DOT
    assert not choice.store_path().exists()
    data = json.loads(choice.bf16_store_path().read_text())
    assert data["choices"][key.text()]["choice"] == "dot"
    choice.forget()                                          # a new process
    monkeypatch.setattr(choice, "measure", lambda key, configs=None: pytest.fail("measured again"))
    assert choice.choose(key) is choice.DOT


def test_a_race_short_of_the_keys_threads_is_not_stored(store, monkeypatch):
    """Other processes kept a core busy during the race (the policy gave 1 of the key's 2
    threads): a one-share configuration may win there and would then hold on an idle
    machine. This process keeps it while the load lasts, nothing is stored; a quiet
    process stores its winner."""
    cfg = template.CONFIGS[2]._replace(serial=True)
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if _equal(fn, cfg) else 1.0)
    monkeypatch.setattr(choice, "_confirm", lambda blas, fn: True)
    monkeypatch.setattr(template, "run", lambda fn, c, a, b, **kw: a @ b)
    monkeypatch.setattr(template, "kernel_for", lambda d, c: type("K", (), {"get": lambda self: c})())
    left = [2]                      # free before the race, one thread left after it
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: left[0])
    race = choice._race
    monkeypatch.setattr(choice, "_race", lambda fns: (race(fns), left.__setitem__(0, 1))[0])
    assert choice.measure(KEY) == cfg
    path = choice.store_path()
    assert not path.exists() or KEY.text() not in json.loads(path.read_text())["choices"]
    choice.forget()
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 2)
    assert choice.measure(KEY) == cfg
    assert json.loads(path.read_text())["choices"][KEY.text()]["choice"] == list(cfg)
    choice.forget()     # a one-thread key's race is kept on one thread
    plain = template.CONFIGS[2]
    monkeypatch.setattr(choice, "_time", lambda fn, budget=0.02: 0.5 if _is(fn, plain) else 1.0)
    monkeypatch.setattr(coreshare.core_share, "threads", lambda: 1)
    one = KEY._replace(threads=1)
    assert choice.measure(one) == plain
    assert json.loads(path.read_text())["choices"][one.text()]["choice"] == list(plain)


def _equal(fn, cfg):
    # (a one-share configuration is made per race: equal to `cfg`, not the same object)
    return any(type(c.cell_contents) is type(cfg) and c.cell_contents == cfg for c in (fn.__closure__ or ()))
